"""Does the compiled resize (``serve --pipeline-compile-resize``) compile again after the
worker's warm-up? The seventh session's worker load tests with it had one 2-5 s push in
pre-processing at the first load level, and none without it (``serve-h200.md``).

Replays the worker's warm-up sizes (three 2h × 2w frames per window, windows 1, 2, 4, 8, 16:
``DevicePath.warm``), then a 1280 × 720 source at the frame counts a loaded worker pushes, and
prints each call's time with Dynamo's recompilation log.

    PYTHONPATH=. python3 scripts/gpu_resize_warm.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttball.kernels.prepost_image import Resizer


def timed(resize: Resizer, frames: torch.Tensor) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    resize(frames)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("gpu_resize_warm.py needs a CUDA GPU")
    torch._logging.set_logs(recompiles=True)
    dev = torch.device("cuda")
    resize = Resizer(288, 512, mode="compile")
    calls = [(3 * w, 576, 1024, "warm-up") for w in (1, 2, 4, 8, 16)]
    calls += [(n, 720, 1280, "load") for n in (48, 45, 96, 93, 144, 16, 17, 300, 48)]
    calls += [(n, 1080, 1920, "1080p") for n in (48, 96)]
    for n, h, w, what in calls:
        frames = torch.randint(0, 255, (n, 3, h, w), dtype=torch.uint8, device=dev)
        first, again = timed(resize, frames), timed(resize, frames)
        print(f"{what:8} {n:4} x {h}x{w}: first {1e3 * first:9.1f} ms, again "
              f"{1e3 * again:7.2f} ms  compile_error={resize.compile_error}", flush=True)


if __name__ == "__main__":
    main()

"""Hardware counters for a few steps of ``triton-fp16`` (issue 9): run under Nsight Compute with
``--profile-from-start off``; only the launches between ``cudaProfilerStart`` and ``Stop`` are
profiled, one per chosen step, with the configuration the tuner picked for that batch size.

    ncu --profile-from-start off --clock-control none --set full --csv --page details \
        python3 scripts/gpu_ncu.py --batch 64 --steps 0,1,5,7,12 > ncu.csv

(``--tma --rows --direct``: with ``triton-fp16-direct``'s candidates, so each step runs what
that backend's tuner picks, the CUDA direct kernels included.)

Without ncu it still runs (the profiler calls are no-ops) and prints each step's tuned
configuration and its time, which is what the counters are read against.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttball.kernels import build_plan
from ttball.kernels.executor import TritonExecutor
from ttball.model import BlurBall, randomize_batchnorm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--height", type=int, default=288)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--steps", default="0,1,5,7,12", help="plan step indices to profile")
    parser.add_argument("--pdl", action="store_true", help="launch with programmatic dependent launch")
    parser.add_argument("--tma", action="store_true", help="let the tuner try TMA configurations")
    parser.add_argument("--rows", action="store_true", help="and the row-walking kernel")
    parser.add_argument("--direct", action="store_true",
                        help="and the CUDA direct kernels (triton-fp16-direct's candidates)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_ncu.py needs a CUDA GPU")
    dev = torch.device("cuda")
    if args.direct:
        from ttball.kernels.direct import direct_missing

        reason = direct_missing(dev)
        if reason:
            sys.exit(f"gpu_ncu.py --direct: {reason}")
    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    ex = TritonExecutor(build_plan(model), dev, pdl=args.pdl, tma=args.tma,
                       rows=args.rows, direct=args.direct)
    x = torch.randn(args.batch, 9, args.height, args.width, device=dev)
    ex(x)  # tunes every step for this shape
    bufs = ex._buffers[tuple(x.shape)]
    configs = ex._configs[tuple(x.shape)]
    steps = [int(s) for s in args.steps.split(",")]
    for i in steps:
        launch, cfg = ex.launches[i], configs[i]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(3):
            launch(bufs.tensors, bufs.sums, cfg)
        start.record()
        for _ in range(10):
            launch(bufs.tensors, bufs.sums, cfg)
        end.record()
        torch.cuda.synchronize()
        print(f"step {i}: {type(launch.step).__name__} {cfg.short()} "
              f"{1e3 * start.elapsed_time(end) / 10:.1f} us", file=sys.stderr, flush=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for i in steps:
        ex.launches[i](bufs.tensors, bufs.sums, configs[i])
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()

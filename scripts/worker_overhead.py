"""The worker's own overhead, without a network: ``ttball serve`` with a fake backend that sleeps
like a GPU call (the GIL is released) and sees no ball, so what `ttball loadtest` measures is
decode, windowing, batching, post-processing, tracking and the WebSocket path.

    python scripts/worker_overhead.py serve --backend sleep --device cpu --torch-threads 1 \
        --warmup-batches 1,2,4 --decode-threads 12 --port 8799 &
    ttball loadtest http://127.0.0.1:8799 --clips real_rally_a.mp4 --sessions 4 --fps 60 \
        --duration 8 --max-frames 120 --deadline-ms 50

``--torch-threads 1`` stands in for a GPU backend, whose backend thread runs torch with one
thread (``ttball/serve/worker.py``). ``TTBALL_SLEEP_MS`` sets the backend's time per call
(default 1.5, about compile-reduce-overhead FP16 at batch 1-2 on an H200). Numbers measured
with it: docs/benchmarks/serve-h200.md.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from ttball.backends.base import BackendBase, register
from ttball.cli import main


class SleepBackend(BackendBase):
    """Sleeps ``seconds`` per call and returns logits of -10 everywhere (no ball)."""

    name = "sleep"

    def __init__(self, device: torch.device, seconds: float) -> None:
        super().__init__(device)
        self.seconds = seconds

    def run(self, batch: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return torch.full((batch.shape[0], 3, *batch.shape[2:]), -10.0)


@register("sleep", description="fake: sleeps TTBALL_SLEEP_MS per call, sees no ball")
def _sleep(model: torch.nn.Module, device: torch.device, **options: object) -> SleepBackend:
    return SleepBackend(torch.device("cpu"), float(os.environ.get("TTBALL_SLEEP_MS", "1.5")) / 1000)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

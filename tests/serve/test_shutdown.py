"""``ttball serve`` in a subprocess: SIGTERM lets the in-flight request finish, then exits 0."""

from __future__ import annotations

import textwrap

import cv2
import numpy as np
import pytest

pytest.importorskip("uvicorn")

from worker_checks import assert_sigterm_finishes_in_flight

SERVER = textwrap.dedent("""
    import sys, time
    import torch
    from ttball.backends import BackendBase, register

    class Slow(BackendBase):
        slow = False

        def warmup(self, batch_sizes, height, width):
            out = super().warmup(batch_sizes, height, width)
            self.slow = True
            return out

        def run(self, batch):
            if self.slow:
                time.sleep(1.5)
            return torch.zeros(batch.shape[0], 3, *batch.shape[2:])

    register("slow-fake", description="test: 1.5 s per batch")(lambda model, device: Slow(device))
    from ttball.cli import COMMANDS, main
    COMMANDS["serve"] = ("ttball.cli.serve", "the worker")
    sys.exit(main(["serve", "--backend", "slow-fake", "--device", "cpu", "--weights", sys.argv[1],
                   "--port", sys.argv[2], "--warmup-batches", "1", "--log-level", "warning"]))
""")


def test_sigterm_finishes_in_flight_request_and_exits_0(small_weights, tmp_path) -> None:
    frames = [cv2.imencode(".png", np.full((36, 64, 3), v, np.uint8))[1].tobytes()
              for v in (1, 2, 3)]
    assert_sigterm_finishes_in_flight(SERVER, small_weights, tmp_path, frames,
                                      'ttball_stage_seconds_count{stage="queue"} 1.0')

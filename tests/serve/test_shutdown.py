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


def test_a_video_stream_cut_by_shutdown_ends_with_an_error_line(tmp_path) -> None:
    """uvicorn cancels what still runs when its graceful shutdown times out: a /v1/track
    stream then ends with a ``shutting_down`` line (not cut without one), and its queued
    steps are cancelled and its upload removed."""
    import asyncio
    import json

    from ttball.serve.track import track_lines

    upload = tmp_path / "upload.mp4"
    upload.write_bytes(b"video")
    pending: list[asyncio.Task[None]] = []

    class NeverDone:  # a feeder whose windows never come back
        async def push_frames(self, session, frames):
            pending.append(asyncio.get_running_loop().create_task(asyncio.Event().wait()))
            return pending[-1]

    async def consume() -> list[bytes]:
        lines = []
        stream = track_lines(None, iter(range(10)), None, NeverDone(), 1, upload)
        task = asyncio.get_running_loop().create_task(_collect(stream, lines))
        await asyncio.sleep(0.05)  # blocked on its first steps
        task.cancel()
        await task
        return lines

    lines = asyncio.run(consume())
    assert [json.loads(line)["error"]["code"] for line in lines] == ["shutting_down"]
    assert not upload.exists() and all(t.cancelled() for t in pending)


async def _collect(stream, lines: list[bytes]) -> None:
    async for line in stream:
        lines.append(line)

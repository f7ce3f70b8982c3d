"""``ttball serve`` in a subprocess: SIGTERM lets the in-flight request finish, then exits 0."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest

pytest.importorskip("uvicorn")

from ttball.client import Client

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigterm_finishes_in_flight_request_and_exits_0(small_weights, tmp_path) -> None:
    port = free_port()
    log = (tmp_path / "server.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(small_weights), str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        with Client(f"http://127.0.0.1:{port}") as client:
            client.wait_ready(timeout=60, poll=0.1)
            frames = [cv2.imencode(".png", np.full((36, 64, 3), v, np.uint8))[1].tobytes()
                      for v in (1, 2, 3)]
            session = client.open_session()
            session.send(frames[0])
            session.send(frames[1])
            with ThreadPoolExecutor(1) as pool:
                in_flight = pool.submit(session.send, frames[2])  # its window takes 1.5 s
                deadline = time.monotonic() + 20
                while 'ttball_stage_seconds_count{stage="queue"} 1.0' not in client.metrics():
                    assert time.monotonic() < deadline, "the window never reached the network"
                    time.sleep(0.05)
                proc.send_signal(signal.SIGTERM)  # while the window is on the network
                rows = in_flight.result(timeout=30)
            assert [r["frame"] for r in rows] == [0, 1]
            assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.seek(0)
        output = log.read()
        log.close()
    assert "Traceback" not in output, output

"""Checks shared by the worker's tests (imported by test_sessions.py, test_device_pipeline.py
and test_shutdown.py): rows against the reference, and SIGTERM in the middle of a request."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ttball.client import Client


def assert_rows_equal(got, want) -> None:
    assert [r["frame"] for r in got] == [r["frame"] for r in want]
    assert [r["visible"] for r in got] == [r["visible"] for r in want]
    for g, w in zip(got, want):
        for key in ("x", "y", "blur_angle_deg", "blur_length_px", "score", "time_s"):
            assert g[key] == pytest.approx(w[key], abs=1e-3), (g, w)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def assert_sigterm_finishes_in_flight(server: str, weights: Path, tmp_path: Path,
                                      frames: list[bytes], queued: str) -> None:
    """Run the worker script ``server`` (argv: weights, port) in a subprocess; send frames 0 and
    1, then frame 2, and send SIGTERM once ``queued`` shows in ``/metrics`` (frame 2's work has
    reached the slow backend). Frame 2's request still gets the rows of frames 0 to 2, the
    worker exits 0, and its log holds no traceback."""
    port = free_port()
    log = (tmp_path / "server.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-c", server, str(weights), str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        with Client(f"http://127.0.0.1:{port}") as client:
            client.wait_ready(timeout=60, poll=0.1)
            session = client.open_session()
            session.send(frames[0])
            session.send(frames[1])
            with ThreadPoolExecutor(1) as pool:
                in_flight = pool.submit(session.send, frames[2])  # its batch takes 1.5 s
                deadline = time.monotonic() + 20
                while queued not in client.metrics():
                    assert time.monotonic() < deadline, f"{queued!r} never showed in /metrics"
                    time.sleep(0.05)
                proc.send_signal(signal.SIGTERM)
                rows = in_flight.result(timeout=30)
            assert [r["frame"] for r in rows] == [0, 1, 2]
            assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.seek(0)
        output = log.read()
        log.close()
    assert "Traceback" not in output, output

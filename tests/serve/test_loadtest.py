"""``ttball loadtest`` against a worker with a fake backend: every frame answered, report fields,
and the loopback-only rule."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise

import cv2
import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")

from conftest import draw_clip
from fastapi import FastAPI, WebSocket

from ttball.backends import BackendBase
from ttball.cli import COMMANDS, main
from ttball.client import Client
from ttball.serve import ServeSettings, create_app
from ttball.serve.app import serve_in_thread


class ZeroBackend(BackendBase):
    name = "zero"

    def run(self, batch):
        return torch.zeros(batch.shape[0], 3, *batch.shape[2:])


@pytest.fixture()
def loadtest(monkeypatch):
    monkeypatch.setitem(COMMANDS, "loadtest", ("ttball.cli.loadtest", "load test"))
    return lambda *args: main(["loadtest", *map(str, args)])


@contextmanager
def ready_worker(weights, backend: type[BackendBase], **settings) -> Iterator[str]:
    """A worker on loopback whose network is ``backend``; its URL once it is ready."""
    app = create_app(ServeSettings(weights=str(weights), device="cpu",
                                   backend_factory=lambda model, device: backend(device),
                                   **settings))
    with serve_in_thread(app) as url:
        with Client(url) as client:
            client.wait_ready(timeout=60, poll=0.05)
        yield url


def run_on_drawn_clip(loadtest, weights, tmp_path, *options) -> tuple[int, dict, str]:
    """3 sessions × 20 fps for 1 s of a drawn 9-frame clip against a ready worker (no ball);
    the exit code, the report and the worker's ``/metrics`` after the run."""
    clip = tmp_path / "clip.mp4"
    draw_clip(clip, frames=9)
    out = tmp_path / "report.json"
    with ready_worker(weights, ZeroBackend, warmup_batches=(1, 2, 4)) as url:
        code = loadtest(url, "--clips", clip, "--sessions", 3, "--fps", 20, "--duration", 1,
                        "--max-frames", 9, "--out", out, "--quiet", *options)
        with Client(url) as client:
            metrics = client.metrics()
    return code, json.loads(out.read_text()), metrics


def test_loadtest_reports_every_frame(loadtest, small_weights, tmp_path) -> None:
    code, report, metrics = run_on_drawn_clip(loadtest, small_weights, tmp_path)
    assert code == 0
    assert report["frames_sent"] == 60 and report["rows"] == 60
    assert report["dropped"] == 0 and report["errors"] == {}
    lat = report["latency_ms"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert report["latency_floor_ms"] == {"mean": 50.0, "max": 100.0}  # step 3 at 20 fps
    assert report["achieved_fps"] > 0 and report["server"]["ready"]
    assert 0.9 < report["active_s"] <= report["elapsed_s"]  # first send → last row: ~the duration
    assert report["achieved_fps"] == pytest.approx(60 / report["active_s"], rel=0.02)
    assert "ttball_frames_total 60.0" in metrics
    host = report["host_cpu"]  # /proc/stat over the run: this machine's share busy and stolen
    assert host is not None and 0 < host["busy_pct"] <= 100 and 0 <= host["steal_pct"] <= 100


def test_loadtest_refuses_remote_and_unbounded(loadtest, tmp_path, capsys) -> None:
    assert loadtest("http://10.1.2.3:8000", "--clips", tmp_path) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert loadtest("http://127.0.0.1:1", "--clips", tmp_path, "--duration", 10_000) == 2
    assert loadtest("http://127.0.0.1:1", "--clips", tmp_path, "--sessions", 0) == 2
    assert loadtest("http://127.0.0.1:1", "--clips", tmp_path, "--processes", 0) == 2


class SlowBackend(BackendBase):
    name = "slow"

    def run(self, batch):
        time.sleep(0.25)  # far slower than the offered rate: the sends back up
        return torch.zeros(batch.shape[0], 3, *batch.shape[2:])


def test_overloaded_run_ends_on_time_with_unsent_frames(loadtest, small_weights, tmp_path) -> None:
    """A worker slower than the offered rate: the sends back up (frames of noise, too large for
    the sockets' buffers), sending stops at the duration, and the report still comes with every
    scheduled frame either sent or counted as unsent."""
    clip = tmp_path / "noise.mp4"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (1280, 720))
    rng = np.random.default_rng(0)
    for _ in range(3):
        writer.write(rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8))
    writer.release()
    out = tmp_path / "report.json"
    with ready_worker(small_weights, SlowBackend, warmup_batches=(1,), max_batch=1) as url:
        start = time.perf_counter()
        code = loadtest(url, "--clips", clip, "--sessions", 2, "--fps", 100, "--duration", 1,
                        "--max-frames", 3, "--jpeg-quality", 100, "--drain-timeout", 1,
                        "--out", out, "--quiet")
        took = time.perf_counter() - start
    assert code == 0
    report = json.loads(out.read_text())
    assert took < 1 + 1 + 6  # duration + drain + clip encoding, start-up and close
    assert report["unsent"] > 0 and report["frames_sent"] + report["unsent"] == 200
    assert report["dropped"] >= report["unsent"]


def test_sessions_split_over_processes_give_one_report(loadtest, small_weights, tmp_path) -> None:
    code, report, metrics = run_on_drawn_clip(loadtest, small_weights, tmp_path,
                                              "--processes", 2)
    assert code == 0
    assert report["sessions"] == 3 and report["frames_sent"] == 60 and report["rows"] == 60
    assert report["dropped"] == 0 and report["errors"] == {}
    assert 'ttball_session_events_total{event="created"} 3.0' in metrics


def test_session_starts_spread_over_one_window_so_windows_do_not_come_in_bursts() -> None:
    from ttball.cli.loadtest import start_offset

    fps, step, sessions = 60.0, 3, 12
    offsets = [start_offset(i, sessions, fps, step) for i in range(sessions)]
    assert offsets[0] == 0 and all(b > a for a, b in pairwise(offsets))
    assert max(offsets) < step / fps
    # each session completes a window every `step` frames; within one window's time, as many
    # sessions complete theirs in each frame interval
    per_interval = [sum(int(o * fps + 1e-9) == k for o in offsets) for k in range(step)]
    assert per_interval == [sessions // step] * step
    assert start_offset(5, 10, 30.0, 1) == 0.5 / 30.0  # step 1: one interval


def _dropping_worker() -> FastAPI:
    """A stand-in worker that ends each stream abnormally: 1011 after two frames, as a
    keepalive timeout does."""
    app = FastAPI()

    @app.get("/readyz")
    async def readyz() -> dict:
        return {"ready": True}

    @app.post("/v1/sessions", status_code=201)
    async def open_session() -> dict:
        return {"id": "s"}

    @app.websocket("/v1/sessions/s/stream")
    async def stream(ws: WebSocket) -> None:
        await ws.accept()
        for _ in range(2):
            await ws.receive_bytes()
        await ws.close(1011, "keepalive ping timeout")

    return app


def test_a_stream_the_worker_drops_is_counted_and_the_report_still_written(
        loadtest, tmp_path) -> None:
    """Every session's loss is counted, its frames dropped, and the run still reports."""
    clip = tmp_path / "clip.mp4"
    draw_clip(clip, frames=9)
    out = tmp_path / "report.json"
    with serve_in_thread(_dropping_worker()) as url:
        code = loadtest(url, "--clips", clip, "--sessions", 2, "--fps", 20, "--duration", 1,
                        "--max-frames", 9, "--drain-timeout", 1, "--out", out, "--quiet")
    assert code == 2  # no rows: the run measured nothing (its report says why)
    report = json.loads(out.read_text())
    assert report["errors"] == {"closed_1011": 2} and report["latency_ms"]["p99"] is None
    assert report["rows"] == 0 and report["dropped"] == 40


def test_host_cpu_shares_between_two_proc_stat_readings() -> None:
    from ttball.cli.loadtest import _host_cpu_text
    from ttball.hostcpu import cpu_shares, cpu_ticks

    before = cpu_ticks("cpu  100 0 100 700 100 0 0 10 5 0")
    after = cpu_ticks("cpu  200 0 200 1000 100 0 0 60 30 0")
    assert before == [100, 0, 100, 700, 100, 0, 0, 10]  # guest (in user already) left out
    shares = cpu_shares(before, after)
    # 50 stolen of 550 ticks over the run; 10 of 1,010 before it, since boot
    assert shares == {"busy_pct": 45.5, "steal_pct": 9.1, "steal_boot_pct": 0.99}
    assert _host_cpu_text(shares) == "; host CPU 45.5 % busy, 9.1 % stolen (0.99 % since boot)"
    old_kernel = cpu_shares(cpu_ticks("cpu 100 0 100 700 100 0 0"),
                            cpu_ticks("cpu 200 0 200 1000 100 0 0"))
    assert old_kernel == {"busy_pct": 40.0, "steal_pct": None, "steal_boot_pct": None}
    assert _host_cpu_text(old_kernel) == "; host CPU 40.0 % busy"
    assert cpu_shares(before, before) is None and cpu_shares(None, after) is None
    assert cpu_ticks("intr 1 2 3") is None and cpu_ticks("cpu x") is None
    assert _host_cpu_text(None) == ""


def test_a_run_every_session_of_which_is_refused_fails_without_a_report(
        loadtest, small_weights, tmp_path, capsys) -> None:
    """A wrong or missing --token: /readyz is open, so the run went on, every session got 401,
    and it exited 0 with a report of NaN latencies (not JSON). Now exit 2 with one line; the
    report, in strict JSON, says what happened."""
    clip = tmp_path / "clip.mp4"
    draw_clip(clip, frames=9)
    out = tmp_path / "report.json"
    with ready_worker(small_weights, ZeroBackend, warmup_batches=(1,), token="sekret") as url:
        code = loadtest(url, "--clips", clip, "--sessions", 2, "--fps", 20, "--duration", 0.5,
                        "--max-frames", 9, "--out", out, "--quiet", "--token", "wrong")
    assert code == 2 and json.loads(out.read_text())["errors"] == {"open_401": 2}
    err = capsys.readouterr().err.strip()
    assert "no rows came back" in err and "--token" in err and "\n" not in err


def test_a_stream_refused_before_it_opens_is_counted_and_the_run_goes_on(
        loadtest, small_weights, tmp_path, monkeypatch, capsys) -> None:
    """The session opens over HTTP but its WebSocket is refused (here: named at a path that
    serves none, as a direct-stream replica with another token would refuse it): websockets'
    InvalidStatus ended the run with a traceback; now each counts as its session's open."""
    import ttball.client

    clip = tmp_path / "clip.mp4"
    draw_clip(clip, frames=9)
    out = tmp_path / "report.json"
    monkeypatch.setattr(ttball.client, "stream_url",
                        lambda base, session: base.replace("http", "ws", 1) + "/v1/nowhere")
    with ready_worker(small_weights, ZeroBackend, warmup_batches=(1,)) as url:
        code = loadtest(url, "--clips", clip, "--sessions", 2, "--fps", 20, "--duration", 0.5,
                        "--max-frames", 9, "--out", out, "--quiet")
    assert code == 2 and json.loads(out.read_text())["errors"] == {"open_404": 2}
    assert "no rows came back" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (("http://127.0.0.1:abc",), "Port could not be cast"),
    (("127.0.0.1:8000",), "http://"),
    (("http://127.0.0.1:1", "--jpeg-quality", 500), "--jpeg-quality"),
    (("http://127.0.0.1:1", "--deadline-ms", "nan"), "--deadline-ms"),
    (("http://127.0.0.1:1", "--drain-timeout", -1), "--drain-timeout"),
])
def test_bad_urls_and_numbers_are_one_line(loadtest, tmp_path, capsys, args, message) -> None:
    assert loadtest(*args, "--clips", tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_server_that_is_not_a_worker_is_one_line(loadtest, tmp_path, capsys) -> None:
    """An HTML page on /readyz (another web server on the port) was printed whole."""
    from fastapi.responses import HTMLResponse

    app = FastAPI()

    @app.get("/readyz")
    def page() -> HTMLResponse:
        return HTMLResponse("<!DOCTYPE html>\n<html>\n<body>\nNot here\n</body>\n</html>", 404)

    clip = tmp_path / "clip.mp4"
    draw_clip(clip, frames=3)
    with serve_in_thread(app) as url:
        assert loadtest(url, "--clips", clip) == 2
    err = capsys.readouterr().err.strip()
    assert "HTTP 404 (not a ttball worker?)" in err and "\n" not in err

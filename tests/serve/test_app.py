"""The worker's behaviour around the network, with fake backends (real BackendBase subclasses):
readiness only after warm-up, 429 under overload, session limits and expiry, auth, verify hook,
start-up failure, the web page mount."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import cv2
import numpy as np
import pytest

pytest.importorskip("fastapi")

from gated_backend import GatedBackend

from ttball.client import Client
from ttball.errors import UserError
from ttball.serve import ServeSettings, create_app
from ttball.serve.app import serve_in_thread


@pytest.fixture()
def start(small_weights):
    """start(**settings) → a Client of a running worker with a fake backend."""
    def go(backend=None, wait=True, **overrides):
        backend = backend or GatedBackend()
        settings = ServeSettings(**{"weights": str(small_weights), "device": "cpu",
                                    "warmup_batches": (1, 2),
                                    "backend_factory": lambda model, device: backend,
                                    **overrides})
        cm = serve_in_thread(create_app(settings))
        url = cm.__enter__()
        opened.append(cm)
        client = Client(url, token=overrides.get("token"))
        clients.append(client)
        if wait:
            client.wait_ready(timeout=60, poll=0.05)
        return client

    opened, clients = [], []
    yield go
    for client in clients:
        client.close()
    for cm in reversed(opened):
        cm.__exit__(None, None, None)


def png(value: int = 0) -> bytes:
    return cv2.imencode(".png", np.full((36, 64, 3), value, np.uint8))[1].tobytes()


def test_ready_only_after_warmup_with_progress(start) -> None:
    gate = threading.Event()
    backend = GatedBackend(warm_gate=gate)
    client = start(backend, wait=False)
    assert client.http.get("/healthz").status_code == 200  # alive while warming
    deadline = time.monotonic() + 30
    while (body := client.readiness())["phase"] != "warmup":
        assert time.monotonic() < deadline, body
        time.sleep(0.02)
    reply = client.http.get("/readyz")
    assert reply.status_code == 503
    assert reply.json()["warmup"] == {"batch_sizes": [1, 2], "done": [], "pending": [1, 2],
                                      "seconds": {}, "tuning": None}
    assert client.http.get("/v2/health/ready").status_code == 503
    assert client.http.get("/v2/models/blurball/ready").status_code == 503
    refused = client.http.post("/v1/sessions", json={})
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "not_ready"
    assert refused.headers["Retry-After"] == "1"
    gate.set()
    body = client.wait_ready(timeout=30, poll=0.02)
    assert body["warmup"]["done"] == [1, 2] and body["startup_seconds"]["total"] > 0
    assert backend.warmed == {1, 2}
    assert client.http.get("/v2/health/ready").status_code == 200


class RecordedBackend(GatedBackend):
    """Says, as the Triton backends do with a cache folder, which sizes took a tuning record."""

    def __init__(self) -> None:
        super().__init__()
        self.tuning: dict[tuple[int, ...], tuple[str, str | None]] = {}

    def run(self, batch):
        shape = tuple(batch.shape)
        self.tuning.setdefault(shape, ("record", None) if shape[0] == 1 else ("tuned", "no record"))
        return super().run(batch)


def test_readiness_says_which_sizes_took_a_tuning_record(start, capfd) -> None:
    client = start(RecordedBackend())
    assert client.readiness()["warmup"]["tuning"] == {"1": "record", "2": "tuned"}
    assert "1 of 2 sizes from tuning records" in capfd.readouterr().out


def test_overload_gets_429_with_retry_after_and_others_finish(start) -> None:
    backend = GatedBackend()
    client = start(backend, max_queue=1, max_batch=1, warmup_batches=(1,))
    gate = backend.run_gate = threading.Event()  # warm-up ran; now batches wait for the gate
    a, b, c = (client.open_session() for _ in range(3))
    for s in (a, b):
        s.send(png(1))
        s.send(png(2))
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(a.send, png(3))  # its window runs and blocks on the gate
        deadline = time.monotonic() + 10
        while backend.sizes.count(1) < 2:  # warm-up's call + this one
            assert time.monotonic() < deadline
            time.sleep(0.01)
        second = pool.submit(b.send, png(3))  # queued: the queue (1) is full
        while 'ttball_queue_depth 1.0' not in client.metrics():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        reply = client.http.post(f"/v1/sessions/{c.id}/frames", content=png(1),
                                 headers={"Content-Type": "image/png"})
        assert reply.status_code == 429
        assert reply.json()["error"]["code"] == "overloaded"
        assert int(reply.headers["Retry-After"]) >= 1
        gate.set()
        assert [r["frame"] for r in first.result(30)] == [0, 1, 2]
        assert [r["frame"] for r in second.result(30)] == [0, 1, 2]
    assert [r["frame"] for r in c.send(png(1))] == []  # and c goes on normally


def test_a_request_of_more_frames_than_the_queue_holds_gets_413_not_a_lasting_429(start) -> None:
    """Admission reserved one window a frame, so at --max-queue 4 a request of 5 frames got 429
    however idle the worker was (a client obeying Retry-After looped), and at step 3 so did 12
    frames, only 4 windows. Now the windows they can complete are reserved: 12 frames at step 3
    pass, and more than an empty queue holds is a 413 that says how many to send."""
    from ttball.client import pack_records

    client = start(max_queue=4, max_batch=2, warmup_batches=(1, 2))
    headers = {"Content-Type": "application/x-ttball-frames"}
    three, one = client.open_session(step=3), client.open_session(step=1)
    assert len(three.send_many([png(i) for i in range(12)])) == 12  # 4 windows: they fit
    for session, frames in ((three, 13), (one, 5)):
        reply = client.http.post(f"/v1/sessions/{session.id}/frames", headers=headers,
                                 content=pack_records([png(i) for i in range(frames)]))
        assert reply.status_code == 413, reply.text
        error = reply.json()["error"]
        assert error["code"] == "too_many_frames" and "at most 4 at step 1" in error["message"]
    assert len(one.send_many([png(i) for i in range(4)])) == 2  # nothing of the refused taken
    assert [r["frame"] for r in three.finish()] == []


def test_session_limit_and_expiry(start) -> None:
    client = start(max_sessions=2, session_ttl_s=0.3)
    first = client.open_session()
    client.open_session()
    reply = client.http.post("/v1/sessions", json={})
    assert reply.status_code == 429 and reply.json()["error"]["code"] == "too_many_sessions"
    deadline = time.monotonic() + 10
    while client.http.get("/v1/sessions").json()["sessions"]:
        assert time.monotonic() < deadline, "idle sessions did not expire"
        time.sleep(0.05)
    assert client.http.get(f"/v1/sessions/{first.id}").status_code == 404
    assert client.http.post("/v1/sessions", json={}).status_code == 201
    assert 'ttball_session_events_total{event="expired"} 2.0' in client.metrics()


def test_bearer_token(start) -> None:
    client = start(token="s3cret")
    anonymous = Client(client.url)
    try:
        assert anonymous.http.get("/healthz").status_code == 200
        assert anonymous.http.get("/readyz").status_code == 200
        assert anonymous.http.get("/v2/health/ready").status_code == 200
        for path in ("/v1", "/metrics", "/v2/models/blurball"):
            reply = anonymous.http.get(path)
            assert reply.status_code == 401, path
        assert anonymous.http.post("/v1/sessions", json={}).json()["error"]["code"] == "unauthorized"
        wrong = anonymous.http.get("/v1", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
    finally:
        anonymous.close()
    session = client.open_session()  # the client sends the token
    with session.stream() as ws:  # so does its WebSocket
        ws.send(png(1))
        ws.send(png(2))
        ws.send(png(3))
        assert ws.recv()["frame"] == 0


def test_non_loopback_needs_a_token_and_max_batch_must_be_warm() -> None:
    with pytest.raises(UserError, match="--token"):
        create_app(ServeSettings(host="0.0.0.0"))
    create_app(ServeSettings(host="0.0.0.0", token="t"))
    with pytest.raises(UserError, match="warm"):
        create_app(ServeSettings(warmup_batches=(1, 2), max_batch=4))


def test_startup_failure_is_reported_never_ready(start) -> None:
    def broken(model, device):
        raise RuntimeError("no such GPU")

    client = start(wait=False, backend_factory=broken)
    deadline = time.monotonic() + 30
    while (body := client.readiness())["phase"] != "failed":
        assert time.monotonic() < deadline, body
        time.sleep(0.02)
    assert "no such GPU" in body["error"]
    assert client.http.get("/readyz").status_code == 503
    assert client.http.get("/healthz").status_code == 200


@pytest.mark.parametrize("passed", [True, False])
def test_verify_gates_readiness(start, monkeypatch, passed) -> None:
    import ttball

    calls = []

    def verify_backend(candidate, reference, clips, tolerances=None, *, config=None):
        calls.append((candidate, reference.name, clips, config))
        return types.SimpleNamespace(passed=passed, reason=lambda: "2 clips, max 3.1 px")

    fake = types.ModuleType("ttball.verify")
    fake.verify_backend = verify_backend
    fake.bundled_reference_clips = lambda: ["clip-a"]
    monkeypatch.setitem(sys.modules, "ttball.verify", fake)
    monkeypatch.setattr(ttball, "verify", fake, raising=False)
    backend = GatedBackend()
    client = start(backend, wait=False, verify=True)
    deadline = time.monotonic() + 30
    while (body := client.readiness())["phase"] not in ("ready", "failed"):
        assert time.monotonic() < deadline, body
        time.sleep(0.02)
    assert body["phase"] == ("ready" if passed else "failed"), body
    assert len(calls) == 1
    candidate, reference, clips, config = calls[0]
    assert candidate is backend and reference == "eager-fp32" and clips == ["clip-a"]
    assert config.name == "test-small"
    if not passed:
        assert body["error"] == "RuntimeError: verification failed: 2 clips, max 3.1 px"


def test_real_verify_passes_for_a_folded_backend(small_weights) -> None:
    pytest.importorskip("ttball.verify")
    settings = ServeSettings(weights=str(small_weights), device="cpu", backend="folded-fp32",
                             warmup_batches=(1,), verify=True, torch_threads=1)
    with serve_in_thread(create_app(settings)) as url, Client(url) as client:
        body = client.wait_ready(timeout=120, poll=0.1)
    assert body["verified"] is True and body["startup_seconds"]["verify"] > 0


def test_web_page_is_served_last(start, tmp_path) -> None:
    (tmp_path / "index.html").write_text("<h1>ttball</h1>")
    client = start(web_dir=str(tmp_path))
    assert client.http.get("/").text == "<h1>ttball</h1>"
    assert client.http.get("/healthz").json()["status"] == "alive"
    # with the page at /, a wrong method on a path that names nothing was the page's 405
    for method, path in (("POST", "/nope"), ("POST", "/v1/sesions"), ("DELETE", "/v1/x")):
        reply = client.http.request(method, path)
        assert reply.status_code == 404, (method, path, reply.text)
        assert reply.json()["error"] == {"code": "not_found",
                                         "message": f"no route for {method} {path}"}
    reply = client.http.post("/")  # the page itself: the method is what is wrong
    assert reply.status_code == 405 and reply.json()["error"]["code"] == "method_not_allowed"
    assert "GET, HEAD" in reply.json()["error"]["message"]
    reply = client.http.put("/v1/sessions")  # a route's path: 405 with the route's methods
    assert (reply.status_code, reply.headers["Allow"]) == (405, "GET, POST"), reply.text
    assert reply.json()["error"]["message"] == "PUT /v1/sessions is not allowed; allowed: GET, POST"
    reply = client.http.get(f"/v1/sessions/{client.open_session().id}/stream")
    assert reply.status_code == 404 and "WebSocket" in reply.json()["error"]["message"]
    for path in ("/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"):
        reply = client.http.head(path)  # probes that send HEAD (404 before)
        assert (reply.status_code, reply.content) == (200, b""), path


def test_websocket_client_gone_while_its_windows_wait_is_cleaned_up(start) -> None:
    backend = GatedBackend()
    client = start(backend, max_ws_inflight=2, max_queue=64)
    gate = backend.run_gate = threading.Event()
    session = client.open_session(step=1)
    from websockets.sync.client import connect

    url = client.url.replace("http", "ws") + f"/v1/sessions/{session.id}/stream"
    with connect(url, close_timeout=0.2) as ws:  # the server isn't reading: don't wait on it
        for value in range(8):  # more frames than may wait: the server stops reading
            ws.send(png(value))
        time.sleep(0.3)
    gate.set()
    deadline = time.monotonic() + 20
    while client.http.get(f"/v1/sessions/{session.id}").status_code != 404:
        assert time.monotonic() < deadline, "session left behind after the client went away"
        time.sleep(0.05)
    assert 'ttball_session_events_total{event="disconnected"} 1.0' in client.metrics()
    other = client.open_session()  # the worker goes on
    assert [other.send(png(v)) for v in (1, 2, 3)][-1][0]["frame"] == 0


def test_shutdown_lets_a_finishing_websocket_session_send_its_last_rows(small_weights) -> None:
    """A session that sent ``finish`` before shutdown gets its last rows, ``end`` and a normal
    close (uvicorn alone closed every WebSocket with 1012 as shutdown began); a stream that has
    not finished is closed with 1012 once the finishing ones are done."""
    from websockets.exceptions import ConnectionClosed

    backend = GatedBackend()
    settings = ServeSettings(weights=str(small_weights), device="cpu", warmup_batches=(1, 2),
                             backend_factory=lambda model, device: backend)
    server = serve_in_thread(create_app(settings))
    url = server.__enter__()
    stopped = threading.Event()
    try:
        with Client(url) as client:
            client.wait_ready(timeout=60, poll=0.05)
            gate = backend.run_gate = threading.Event()  # every window waits from now on
            finishing, live = client.open_session(step=3), client.open_session(step=3)
            with finishing.stream() as ws, live.stream() as other:
                for value in (1, 2, 3, 4):
                    ws.send(png(value))
                other.send(png(5))
                ws.ws.send(json.dumps({"type": "finish"}))
                time.sleep(0.3)  # the finish is under way, its windows held by the gate
                threading.Thread(target=lambda: (server.__exit__(None, None, None),
                                                 stopped.set()), daemon=True).start()
                time.sleep(0.5)  # shutdown has begun and waits for the finishing session
                assert not stopped.is_set()
                gate.set()
                messages = []
                while (message := ws.recv(timeout=30))["type"] != "end":
                    messages.append(message)
                assert [m["frame"] for m in messages if m["type"] == "result"] == [0, 1, 2, 3]
                with pytest.raises(ConnectionClosed):
                    ws.ws.recv(timeout=10)
                assert ws.ws.close_code == 1000
                with pytest.raises(ConnectionClosed):
                    while True:
                        other.ws.recv(timeout=10)
                assert other.ws.close_code == 1012
    finally:
        assert stopped.wait(60)


def test_stream_app_serves_only_the_stream_with_the_same_token(small_weights) -> None:
    """What a --direct-streams replica serves on its own port, around the replica's worker."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    from ttball.serve.app import stream_app

    settings = ServeSettings(weights=str(small_weights), device="cpu", warmup_batches=(1,),
                             token="s3cret")
    worker = create_app(settings).state.worker  # built, not started: no session is open
    with serve_in_thread(stream_app(worker)) as url:
        ws_url = url.replace("http", "ws", 1) + "/v1/sessions/nope/stream"
        with pytest.raises(InvalidStatus) as refused:  # no token: refused before the upgrade
            connect(ws_url, compression=None)
        assert refused.value.response.status_code == 401  # the JSON error (an empty 403 before)
        with connect(ws_url + "?token=s3cret", compression=None) as ws:
            # past the token: the worker's own answer (this one never started)
            assert json.loads(ws.recv(timeout=10))["error"]["code"] == "not_ready"
        with Client(url, token="s3cret") as client:  # nothing but the stream is served
            assert client.http.post("/v1/sessions", json={}).status_code in (404, 405)


def test_direct_streams_is_a_ray_option() -> None:
    import argparse

    from ttball.cli.serve import add_arguments, run, settings_from

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert settings_from(parser.parse_args(["--ray", "--direct-streams"])).direct_streams
    with pytest.raises(UserError, match="--direct-streams needs --ray"):
        run(parser.parse_args(["--direct-streams"]))



def test_switch_interval_reaches_the_settings_and_a_bad_one_is_refused() -> None:
    import argparse

    from ttball.cli.serve import add_arguments, settings_from

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert settings_from(parser.parse_args([])).switch_interval_ms is None
    assert settings_from(parser.parse_args(["--switch-interval-ms", "0.5"])).switch_interval_ms == 0.5
    with pytest.raises(UserError, match="--switch-interval-ms must be between 0.01 and 100, got 0"):
        settings_from(parser.parse_args(["--switch-interval-ms", "0"]))


def test_auto_backend_is_chosen_during_start_up_and_cached(small_weights, tmp_path,
                                                          monkeypatch) -> None:
    pytest.importorskip("ttball.verify")
    from ttball.backends import auto

    monkeypatch.setenv("TTBALL_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):  # restored after the test
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    monkeypatch.setitem(auto.CANDIDATES, "cpu", ("cudagraph-fp16", "folded-fp32",
                                                 "eager-fp32"))
    seen = []  # the Triton cache and cache_dir each selection compiles into: --compile-cache's
    choose = auto.choose_backend
    monkeypatch.setattr(auto, "choose_backend", lambda *a, **k: (
        seen.append((os.environ.get("TRITON_CACHE_DIR"), k.get("cache_dir"))), choose(*a, **k))[1])
    settings = ServeSettings(weights=str(small_weights), device="cpu", backend="auto",
                             warmup_batches=(1,), torch_threads=1,
                             compile_cache=str(tmp_path / "compiled"))
    with serve_in_thread(create_app(settings)) as url, Client(url) as client:
        body = client.wait_ready(timeout=180, poll=0.1)
    trials = {t["name"]: t["status"] for t in body["auto"]["trials"]}
    assert body["backend"] in {"folded-fp32", "eager-fp32"}, body
    assert body["auto"]["chosen"] == body["backend"] and body["auto"]["cached"] is False
    assert trials["cudagraph-fp16"] == "unavailable"
    assert trials[body["backend"]] == "chosen"
    assert body["startup_seconds"]["choose"] > 0
    assert (tmp_path / "cache" / "auto-backend.json").exists()

    with serve_in_thread(create_app(settings)) as url, Client(url) as client:
        again = client.wait_ready(timeout=60, poll=0.1)
    assert again["auto"]["cached"] is True and again["backend"] == body["backend"]
    compiled = (tmp_path / "compiled").resolve()
    assert seen == [(str(compiled / "triton"), compiled)] * 2


def test_cuda_blocking_sync_without_cuda_says_why_and_serves(start, capfd) -> None:
    """--cuda-blocking-sync on a machine whose process cannot set it (no driver or no device
    here): the worker still comes up, and its log says why the option was not applied."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device: the GPU test in tests/test_cudasched.py covers it")
    client = start(cuda_blocking_sync=True)
    assert client.readiness()["ready"] is True
    assert "--cuda-blocking-sync not applied: " in capfd.readouterr().out


def test_a_ready_worker_measures_its_event_loops_lag(start) -> None:
    """Once ready, the worker times its own event loop (``ttball_event_loop_lag_seconds``,
    a callback due every 10 ms): the count grows while it serves nothing."""
    client = start()

    def count() -> float:
        line = next(l for l in client.metrics().splitlines()
                    if l.startswith("ttball_event_loop_lag_seconds_count"))
        return float(line.split()[-1])

    first = count()
    time.sleep(0.3)
    assert count() >= first + 5


def test_readyz_names_the_event_loop(start) -> None:
    """``event_loop``: uvloop where uvicorn found it, else asyncio's own."""
    import importlib.util

    body = start().readiness()
    want = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    assert body["event_loop"] == want


def test_auto_clips_only_with_auto_and_only_clips_that_exist(tmp_path) -> None:
    from ttball.errors import UserError

    with pytest.raises(UserError, match="--auto-clips only applies with --backend auto"):
        ServeSettings(backend="eager-fp32", auto_clips=(str(tmp_path),)).validate()
    with pytest.raises(UserError, match="no such file or folder"):
        ServeSettings(backend="auto", auto_clips=(str(tmp_path / "nope.mp4"),)).validate()
    ServeSettings(backend="auto", auto_clips=(str(tmp_path),)).validate()


def test_a_client_gone_mid_body_counts_as_499_not_a_server_error(start) -> None:
    """A client that sends part of a body and leaves: starlette raises ClientDisconnect, which
    was a 500 (a traceback in the log, a 5xx in ``ttball_requests_total``). Raw socket: send a
    Content-Length of 100 and 2 bytes, then close."""
    import socket
    from urllib.parse import urlsplit

    client = start()
    session = client.open_session()
    where = urlsplit(client.url)
    with socket.create_connection((where.hostname, where.port), timeout=5) as sock:
        sock.sendall(f"POST /v1/sessions/{session.id}/frames HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: image/png\r\nContent-Length: 100\r\n\r\n{}".encode())
    route = 'route="/v1/sessions/{sid}/frames"'
    deadline = time.monotonic() + 10
    while f'{route},status="499"' not in (text := client.metrics()):
        assert time.monotonic() < deadline, [line for line in text.splitlines() if route in line]
        time.sleep(0.05)
    assert f'{route},status="500"' not in text
    assert 'ttball_errors_total{kind="client_disconnected"}' in text
    assert session.describe()["frames"] == 0


@pytest.mark.parametrize("http", ["h11", "httptools"])
@pytest.mark.parametrize("request_bytes", [
    b"NOT HTTP AT ALL\r\n\r\n",
    b"GET /v1/info HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
    b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: nine\r\n\r\n"])
def test_a_request_uvicorn_cannot_parse_gets_the_json_error_body(small_weights, http,
                                                                 request_bytes) -> None:
    """uvicorn answers such a request itself, before the application: it was a plain-text
    "Invalid HTTP request received."; the worker goes on serving."""
    if http == "httptools":
        pytest.importorskip("httptools")
    backend = GatedBackend()
    settings = ServeSettings(weights=str(small_weights), device="cpu", warmup_batches=(1,),
                             backend_factory=lambda model, device: backend)
    with serve_in_thread(create_app(settings), http=http) as url, Client(url) as client:
        reply = _raw_reply(url, request_bytes)
        assert (reply.status, reply.reason) == (400, "Bad Request"), reply
        assert reply.headers["content-type"] == "application/json"
        assert int(reply.headers["content-length"]) == len(reply.body)
        assert json.loads(reply.body)["error"]["code"] == "bad_request"
        client.wait_ready(timeout=60, poll=0.05)  # and it goes on serving


class RawReply(NamedTuple):
    status: int
    reason: str
    headers: dict[str, str]  # names in lower case
    body: bytes


def _raw_reply(url: str, request: bytes) -> RawReply:
    """``request`` sent on a fresh connection to ``url``'s server, and the whole reply."""
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    _, status, reason = lines[0].split(" ", 2)
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in lines[1:])}
    return RawReply(int(status), reason, headers, body)


@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_a_refused_websocket_handshake_gets_the_json_error_body(small_weights, http) -> None:
    """Refusals before a WebSocket opens were uvicorn's: an empty 403 for a wrong token or a
    path with no WebSocket, plain text for a malformed upgrade. Now ttball's JSON error, with
    the status that says why; the client raises it as a ServeError."""
    if http == "httptools":
        pytest.importorskip("httptools")
    from ttball.client import ServeError, Session

    upgrade = ("GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Version: {version}\r\n{key}\r\n")
    key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    backend = GatedBackend()
    settings = ServeSettings(weights=str(small_weights), device="cpu", warmup_batches=(1,),
                             backend_factory=lambda model, device: backend, token="s3cret")
    with serve_in_thread(create_app(settings), http=http) as url, \
            Client(url, token="s3cret") as client:
        client.wait_ready(timeout=60, poll=0.05)
        session = client.open_session()
        cases = [  # path, version, key, token: status, code
            (f"/v1/sessions/{session.id}/stream", 13, key, "", 401, "unauthorized"),
            (f"/v1/sessions/{session.id}/stream", 13, key, "?token=nope", 401, "unauthorized"),
            ("/v1/nowhere?token=s3cret", 13, key, "", 404, "not_found"),
            (f"/v1/sessions/{session.id}/stream?token=s3cret", 13, "", "", 400, "bad_request"),
            (f"/v1/sessions/{session.id}/stream?token=s3cret", 12, key, "", 400, "bad_request")]
        for path, version, with_key, token, status, code in cases:
            got, _, headers, body = _raw_reply(url, upgrade.format(
                path=path + token, version=version, key=with_key).encode())
            assert (got, headers["content-type"]) == (status, "application/json"), (path, body)
            assert int(headers["content-length"]) == len(body)
            error = json.loads(body)["error"]
            assert error["code"] == code and error["message"], (path, error)
            if status == 401:
                assert headers["www-authenticate"] == "Bearer"
        with Client(url, token="nope") as wrong, pytest.raises(ServeError) as refused:
            Session(wrong, session.id, session.ws_url).stream()
        assert (refused.value.status, refused.value.code) == (401, "unauthorized")
        with session.stream() as ws:  # the right token still opens it
            ws.send(png())
        assert 'ttball_errors_total{kind="not_found"}' in client.metrics()

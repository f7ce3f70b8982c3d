"""``ttball serve --ray`` on a real local Ray cluster (2 CPUs, loopback): two CPU replicas of
the small random-weight model behind the ingress.

Interleaved sessions (HTTP and WebSocket) give the single worker's rows; killing the replica
that holds some sessions keeps the others untouched and resumes the killed ones elsewhere. Both
also in the device-pipeline mode (``--device-pipeline``: the ``mode`` fixture, one application
deployed at a time), whose bad frames are refused as the single worker refuses them.
Run inside a loopback-only network namespace (see test_archive.py).
"""

from __future__ import annotations

import json
import os
import random
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import pytest

if os.environ.get("TTBALL_RAY_TESTS") != "1":
    pytest.skip("Ray tests need TTBALL_RAY_TESTS=1 and a loopback-only network namespace",
                allow_module_level=True)
ray = pytest.importorskip("ray")
pytest.importorskip("fastapi")

from conftest import SMALL

from ttball.client import Client, ServeError, pack_records
from ttball.distributed.serve import RayServeSettings, parse_autoscale, start, stop
from ttball.errors import UserError
from ttball.serve import ServeSettings, create_app
from ttball.serve.app import serve_in_thread

pytestmark = pytest.mark.ray

FRAMES = 12  # per session: four step-3 windows
SESSIONS = 4
# worker settings of each mode; "direct": WebSockets served by the replicas themselves
# (the device mode's also take live settings: PUT /v1/admin/settings)
# /v1/track's video reaches its replica in pieces of this size (the test clip's 2.7 KB: three)
UPLOAD_PIECE = 1024
MODES = {"host": {}, "device": {"device_pipeline": True, "live_settings": True},
         "direct": {"direct_streams": True}}


def clip(seed: int, n: int = FRAMES) -> list[bytes]:
    """JPEG frames of a ball crossing (both servers decode them with cv2: the same pixels;
    the device pipeline takes JPEG only)."""
    h, w = SMALL
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(n):
        img = np.full((h, w, 3), (40, 90, 30), np.uint8)
        img = cv2.add(img, rng.integers(0, 20, img.shape, dtype=np.uint8))
        cv2.circle(img, (8 + i * (w - 16) // n, h // 2 + seed * 3), 3, (255, 255, 255), -1)
        frames.append(cv2.imencode(".jpg", img)[1].tobytes())
    return frames


def free_port() -> int:
    """A free port below Linux's ephemeral range (32768-60999): the kernel hands ephemeral
    ports to Ray's own processes as they start, and one of them once took the port a test had
    picked with ``bind(0)`` before ``serve`` bound it ("Failed to bind to address")."""
    for port in random.sample(range(20000, 32000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-31999")


def worker_settings(weights: Path, **overrides) -> ServeSettings:
    return ServeSettings(**{"weights": str(weights), "device": "cpu", "warmup_batches": (1, 2),
                            "torch_threads": 1, "decode_threads": 1, **overrides})


@pytest.fixture(scope="module")
def port() -> int:
    """Serve's HTTP proxy keeps the port it was started with: one for every application."""
    return free_port()


@pytest.fixture(scope="module", params=["host"])
def mode(request) -> str:
    """The worker's mode, a key of MODES: "host" unless a test parametrizes it (indirect).
    Tests are grouped by mode, so each mode's application is deployed once."""
    return str(request.param)


@pytest.fixture(scope="module")
def url(ray_cluster, port: int, small_weights: Path, mode: str):
    """The application in ``mode`` (pytest tears one mode's down before it deploys the next)."""
    settings = RayServeSettings(
        worker=worker_settings(small_weights, port=port, switch_interval_ms=1.0, **MODES[mode]),
        replicas=2, cpus_per_replica=1, mps_sm_percent=50,  # no effect without MPS and CUDA
        upload_chunk_bytes=UPLOAD_PIECE, graceful_timeout_s=7.0)
    started = start(settings)
    base = f"http://127.0.0.1:{settings.worker.port}"
    with Client(base) as client:
        client.wait_ready(timeout=120, poll=0.2)
    yield base
    stop(settings, started)


@pytest.fixture(scope="module")
def expected(small_weights: Path, mode: str) -> dict[int, list[dict]]:
    """The single worker's rows (in ``mode``) for each clip, sent frame by frame."""
    app = create_app(worker_settings(small_weights, **MODES[mode]))
    with serve_in_thread(app) as base, Client(base) as c:
        c.wait_ready(timeout=60, poll=0.05)
        out = {}
        for seed in range(SESSIONS):
            session = c.open_session()
            rows = [r for png in clip(seed) for r in session.send(png)]
            out[seed] = rows + session.finish()
        return out


def assert_rows_equal(got: list[dict], want: list[dict]) -> None:
    assert [r["frame"] for r in got] == [r["frame"] for r in want]
    assert [r["visible"] for r in got] == [r["visible"] for r in want]
    for g, e in zip(got, want):
        for key in ("x", "y"):
            assert g[key] == pytest.approx(e[key], abs=2e-3)
        assert g["score"] == pytest.approx(e["score"], abs=2e-5)


def _replica_of(client: Client, sid: str) -> str:
    return str(client._json("GET", f"/v1/sessions/{sid}")["replica"])


@pytest.mark.parametrize("mode", list(MODES), indirect=True)
def test_interleaved_sessions_on_two_replicas_match_the_single_worker(url, expected, mode,
                                                                     port) -> None:
    with Client(url) as client:
        sessions = [client.open_session() for _ in range(SESSIONS)]
        replicas = {_replica_of(client, s.id) for s in sessions}
        assert len(replicas) == 2  # new sessions go to the replica with fewer
        stream_ports = {s.ws_url.split(":")[2].split("/")[0] for s in sessions}
        if mode == "direct":  # each replica serves its sessions' streams on a port of its own
            assert len(stream_ports) == 2 and str(port) not in stream_ports
        else:  # the ingress serves every stream
            assert stream_ports == {str(port)}
        clips = {seed: clip(seed) for seed in range(SESSIONS)}
        got: dict[int, list[dict]] = {seed: [] for seed in range(SESSIONS)}
        streams = {seed: sessions[seed].stream() for seed in (2, 3)}  # two by WebSocket
        for k in range(FRAMES):
            for seed in range(SESSIONS):
                if seed in streams:
                    streams[seed].send(clips[seed][k])
                else:
                    got[seed] += sessions[seed].send(clips[seed][k])
        # a stream holds its session, on the ingress or (--direct-streams) on its replica: no
        # HTTP request through the ingress may push to, finish or delete it (with direct
        # streams all three went through, and the stream's client lost rows)
        sid = sessions[2].id
        for reply in (client.http.post(f"/v1/sessions/{sid}/frames", content=clips[2][0],
                                       headers={"Content-Type": "image/jpeg"}),
                      client.http.post(f"/v1/sessions/{sid}/finish", timeout=10),
                      client.http.delete(f"/v1/sessions/{sid}")):
            assert reply.status_code == 409 and reply.json()["error"]["code"] == "session_busy", (
                reply.request.method, reply.request.url.path, reply.text)
        # so may no second socket through the ingress: refused at once, as on the single worker
        # (with direct streams it took each frame and answered each with session_busy)
        from websockets.exceptions import ConnectionClosedError
        from websockets.sync.client import connect

        with connect(f"ws://127.0.0.1:{port}/v1/sessions/{sid}/stream") as second:
            assert json.loads(second.recv(timeout=10))["error"]["code"] == "session_busy"
            with pytest.raises(ConnectionClosedError) as closed:
                second.recv(timeout=10)
            assert closed.value.rcvd.code == 4409
        for seed in range(SESSIONS):
            if seed in streams:
                messages = streams[seed].finish()
                streams[seed].__exit__(None, None, None)
                assert {m["type"] for m in messages} == {"result"}, messages
                got[seed] = [{k: v for k, v in m.items() if k != "type"} for m in messages]
            else:
                got[seed] += sessions[seed].finish()
        for seed in range(SESSIONS):
            assert_rows_equal(got[seed], expected[seed])
        info = client.info()
        if mode == "direct":  # the ingress learns of streams that ended on a replica by polling
            deadline = time.monotonic() + 15
            while info["sessions"] and time.monotonic() < deadline:
                time.sleep(0.5)
                info = client.info()
        assert info["ready"] and info["ray"]["replicas"] == 2 and info["sessions"] == 0


def test_metrics_infer_and_track_keep_the_single_worker_api(url, small_weights,
                                                            tmp_path: Path) -> None:
    from conftest import draw_clip

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 9, *SMALL)).astype(np.float32)
    video = tmp_path / "clip.mp4"
    draw_clip(video, frames=7, size=(SMALL[1], SMALL[0]))
    with serve_in_thread(create_app(worker_settings(small_weights))) as base, Client(base) as c:
        c.wait_ready(timeout=60, poll=0.05)
        want_logits, want_track = c.infer(x), list(c.track(video))
    with Client(url) as client:
        np.testing.assert_allclose(client.infer(x), want_logits, atol=1e-4)
        np.testing.assert_allclose(client.infer(x, binary=False), want_logits, atol=1e-4)
        assert video.stat().st_size > 2 * UPLOAD_PIECE
        got_track = list(client.track(video))
        assert_rows_equal(got_track[:-1], want_track[:-1])
        assert got_track[-1]["summary"]["frames"] == 7
        metrics = client.metrics()
        assert metrics.count("ttball_ready{replica=") == 2
        assert 'ttball_requests_total{method="POST",route="/v2/models/{model}/infer"' in metrics
        assert "ttball_replicas 2.0" in metrics
        # --mps-sm-percent reached each replica's environment (runtime_env), as /readyz says
        replicas = client.readiness()["replicas"]
        assert [r["gpu"] for r in replicas] == [
            {"multiprocessors": None, "mps_active_thread_percentage": 50, "sched": None,
             "sched_note": None}] * 2
        assert [r["switch_interval_ms"] for r in replicas] == [1.0] * 2  # set in each replica
        assert all(r["warmup"]["done"] and r["startup_seconds"]["total"] > 0 for r in replicas)
        assert [r["decoder_start"] for r in replicas] == [None] * 2  # no decode children
        from ray.serve.context import _get_global_client

        deployments = _get_global_client().get_serve_details()["applications"]["ttball"][
            "deployments"]  # --graceful-timeout reached both (Ray Serve's 20 s before)
        assert {name: d["deployment_config"]["graceful_shutdown_timeout_s"]
                for name, d in deployments.items()} == {"TTBallIngress": 7.0, "TTBallWorker": 7.0}
        assert client.http.get("/v2/models/blurball/ready").status_code == 200
        with pytest.raises(ServeError) as refused:
            client.open_session(step=2)
        assert refused.value.code == "bad_options"
        with pytest.raises(ServeError) as unknown:
            client._json("POST", "/v1/sessions/nope/frames", content=b"x",
                         headers={"Content-Type": "image/png"})
        assert unknown.value.status == 404
        session = client.open_session()  # an error raised on the replica comes back as it is
        with pytest.raises(ServeError) as garbage:
            session.send(b"GIF89a not really")
        assert (garbage.value.status, garbage.value.code) == (400, "not_an_image")
        session.delete()
        short = tmp_path / "short.mp4"  # refused on the replica before a row: a 400 here too
        draw_clip(short, frames=2, size=(SMALL[1], SMALL[0]))
        with pytest.raises(ServeError) as too_short:
            list(client.track(short))
        assert (too_short.value.status, too_short.value.code) == (400, "video_too_short")
        metrics = client.metrics()  # the ingress times its calls to the replicas
        for method in ("infer", "push"):
            assert f'ttball_ingress_call_seconds_count{{method="{method}"}}' in metrics


def test_an_ended_session_no_longer_counts_for_its_replica(url) -> None:
    """A new session goes to the replica with the fewest live sessions (ties: the lower id).
    A deleted or finished one stops counting at once: the router counted it for 30 s more,
    so the next session went to the full replica beside the one it had left (with
    --max-sessions, a 429 from the full one)."""
    with Client(url) as client:
        ids = sorted(r["replica"] for r in client.readiness()["replicas"])

        def expected() -> str:
            live = [s["replica"] for s in client._json("GET", "/v1/sessions")["sessions"]]
            return min(ids, key=lambda r: (live.count(r), r))

        opened = []
        for _ in range(2):
            want = expected()
            opened.append(client.open_session())
            assert _replica_of(client, opened[-1].id) == want
        assert {_replica_of(client, s.id) for s in opened} == set(ids)
        for end in ("delete", "finish"):
            on_high = next(s for s in opened if _replica_of(client, s.id) == ids[1])
            getattr(on_high, end)()
            opened.remove(on_high)
            assert expected() == ids[1]  # tied on the router's old count: ids[0], the full one
            opened.append(client.open_session())
            assert _replica_of(client, opened[-1].id) == ids[1]
        for s in opened:
            s.delete()


@pytest.mark.parametrize("mode", ["direct"], indirect=True)
def test_a_refused_delete_keeps_its_session_on_its_replica(url, expected, mode) -> None:
    """A directly streamed session's delete through the ingress is refused 409; the session
    keeps its replica after that. The router dropped it 30 s after any routed delete or
    finish, refused ones too, so its next call went to the replica of fewest sessions, which
    resumed a second copy (a push answered 200 beside the live stream)."""
    with Client(url) as client:
        ids = sorted(r["replica"] for r in client.readiness()["replicas"])
        first, streamed = client.open_session(), client.open_session()
        assert [_replica_of(client, s.id) for s in (first, streamed)] == ids
        first.delete()  # ids[0] empty: the replica a dropped session would go to
        frames = clip(0)
        with streamed.stream() as ws:
            for png in frames[:6]:
                ws.send(png)
            refused = client.http.delete(f"/v1/sessions/{streamed.id}")
            assert refused.status_code == 409, refused.text
            time.sleep(32)  # past the old grace
            push = client.http.post(f"/v1/sessions/{streamed.id}/frames", content=frames[0],
                                    headers={"Content-Type": "image/jpeg"})
            assert push.status_code == 409, push.text
            assert push.json()["error"]["code"] == "session_busy"
            assert _replica_of(client, streamed.id) == ids[1]
            for png in frames[6:]:
                ws.send(png)
            messages = ws.finish()
        rows = [{k: v for k, v in m.items() if k != "type"} for m in messages]
        assert {m["type"] for m in messages} == {"result"}, messages
        assert_rows_equal(rows, expected[0])


def test_a_client_gone_mid_upload_leaves_no_video_behind(url) -> None:
    """/v1/track's body reaches its replica in pieces as it arrives (the ingress held the
    whole video); a client that stops half-way leaves no file on the replica (same host: the
    temporary folder) and no count in the router (the next sessions still spread)."""
    import tempfile

    def arriving() -> tuple[int, set[Path]]:  # videos the replicas say they take; their files
        with Client(url) as client:
            counts = [r["uploads"] for r in client._json("GET", "/readyz")["replicas"]]
        return sum(counts), set(Path(tempfile.gettempdir()).glob("ttball-track-*"))

    _, before = arriving()
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/track HTTP/1.1\r\nHost: x\r\nContent-Type: video/mp4\r\n"
                  b"Content-Length: 1000000\r\n\r\n")
        for _ in range(10):
            s.sendall(bytes(UPLOAD_PIECE))
        deadline = time.monotonic() + 10  # the ingress polls the replicas every 2 s
        while time.monotonic() < deadline and arriving()[0] == 0:
            time.sleep(0.1)
        count, files = arriving()
        assert count == 1 and len(files - before) == 1, "the video is not arriving at a replica"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and arriving() != (0, before):
        time.sleep(0.1)
    assert arriving() == (0, before)
    with Client(url) as client:
        sessions = [client.open_session() for _ in range(2)]
        assert len({_replica_of(client, s.id) for s in sessions}) == 2
        for session in sessions:
            session.delete()


def bad_frames(good: bytes) -> dict[str, tuple[bytes, str, int, str]]:
    """name → (body, Content-Type, the single worker's status and code in device mode);
    as tests/serve/test_device_pipeline.py's BAD_FRAMES."""
    h, w = SMALL
    png = cv2.imencode(".png", cv2.imdecode(np.frombuffer(good, np.uint8), cv2.IMREAD_COLOR))
    return {
        "corrupt": (good[:len(good) // 2], "image/jpeg", 400, "not_an_image"),
        "other-size": (cv2.imencode(".jpg", np.zeros((h // 2, w // 2, 3), np.uint8))[1].tobytes(),
                       "image/jpeg", 422, "frame_size"),
        "png": (png[1].tobytes(), "image/png", 415, "unsupported_media_type"),
        "raw": (bytes(h * w * 3), "application/octet-stream", 415, "unsupported_media_type"),
        "records": (pack_records([good, good[:len(good) // 2]]), "application/x-ttball-frames",
                    400, "not_an_image"),
    }


@pytest.mark.parametrize("mode", ["device"], indirect=True)
def test_device_pipeline_refuses_bad_frames_like_the_single_worker(url, expected) -> None:
    """Bad frames of session 0 (HTTP) and 2 (WebSocket), sent among every session's good ones,
    get the single worker's 4xx; the two go on, and the other sessions never notice."""
    clips = {seed: clip(seed) for seed in range(SESSIONS)}
    bad = bad_frames(clips[0][0])
    with Client(url) as client:
        sessions = [client.open_session() for _ in range(SESSIONS)]
        got: dict[int, list[dict]] = {seed: [] for seed in range(SESSIONS)}
        with sessions[2].stream() as ws:
            for k in range(FRAMES):
                for seed in (0, 1, 3):
                    got[seed] += sessions[seed].send(clips[seed][k])
                ws.send(clips[2][k])
                if k != 3:
                    continue
                for body, kind, status, code in bad.values():
                    reply = client.http.post(
                        f"/v1/sessions/{sessions[0].id}/frames", content=body,
                        params={"width": SMALL[1], "height": SMALL[0]},
                        headers={"Content-Type": kind})
                    assert (reply.status_code, reply.json()["error"]["code"]) == (status, code)
                for name in ("corrupt", "other-size", "png"):  # frames 4, 5, 6 of the socket
                    ws.send(bad[name][0])
                # the socket holds its session: no HTTP request may delete or finish it
                sid = sessions[2].id
                for reply in (client.http.delete(f"/v1/sessions/{sid}"),
                              client.http.post(f"/v1/sessions/{sid}/finish", timeout=10)):
                    assert (reply.status_code, reply.json()["error"]["code"]) == (409,
                                                                                  "session_busy")
            messages = ws.finish()
        for seed in (0, 1, 3):
            got[seed] += sessions[seed].finish()
            assert_rows_equal(got[seed], expected[seed])  # refused HTTP frames take no number
        errors = [(m["frame"], m["error"]["code"]) for m in messages if m["type"] == "error"]
        assert errors == [(4, "not_an_image"), (5, "frame_size"), (6, "unsupported_media_type")]
        rows = [{k: v for k, v in m.items() if k != "type"} for m in messages
                if m["type"] == "result"]
        assert [r["frame"] for r in rows] == [f for f in range(FRAMES + 3) if f not in (4, 5, 6)]
        assert_rows_equal(rows[:3], expected[2][:3])  # the window before the refused frames
        assert client.readiness()["device_pipeline"]["decoder"] == "cv2"
        metrics = client.metrics()
        assert metrics.count("ttball_push_frames_count{replica=") == 2
        assert 'ttball_errors_total{kind="unsupported_media_type"}' in metrics


@pytest.mark.parametrize("mode", ["device"], indirect=True)
def test_live_settings_reach_every_replica(url) -> None:
    """--live-settings through the ingress: the change is applied by both replicas (their
    values by replica id, and in /readyz); a refusal is the replicas' 422, nothing applied."""
    with Client(url) as client:
        reply = client.http.put("/v1/admin/settings", json={"max_delay_ms": 1.5})
        assert reply.status_code == 200, reply.text
        replicas = reply.json()["replicas"]
        assert len(replicas) == 2 and all(v["max_delay_ms"] == 1.5 for v in replicas.values())
        ready = client.readiness()["replicas"]
        assert sorted(r["replica"] for r in ready) == sorted(replicas)
        assert all(r["live_settings"]["max_delay_ms"] == 1.5 for r in ready)
        refused = client.http.put("/v1/admin/settings",
                                  json={"max_delay_ms": 3.0, "flush_after_push": True})
        assert refused.status_code == 422 and "--pipeline-overlap" in refused.text
        assert all(r["live_settings"]["max_delay_ms"] == 1.5
                   for r in client.readiness()["replicas"])
        back = client.http.put("/v1/admin/settings", json={"max_delay_ms": 2.0})
        assert back.status_code == 200


@pytest.mark.parametrize("mode", list(MODES), indirect=True)
def test_a_killed_replica_loses_only_its_frames_in_flight(url, expected, mode) -> None:
    """Kill the replica of two sessions halfway: the other two never notice; the two go on from
    the next window on another replica. Sessions 0, 1 send by HTTP, 2, 3 by WebSocket; each
    WebSocket frame gets exactly one answer, a row or a ``replica_lost`` error. With direct
    streams, a WebSocket served by the killed replica closes instead (docs/ray.md)."""
    from websockets.exceptions import ConnectionClosed

    clips = {seed: clip(seed) for seed in range(SESSIONS)}
    # one frame past a window at the kill: the replica holds that frame, no window for it yet
    half, http = FRAMES // 2 + 1, (0, 1)
    closed: set[int] = set()
    with Client(url) as client:
        sessions = [client.open_session() for _ in range(SESSIONS)]
        streams = {seed: sessions[seed].stream() for seed in range(SESSIONS) if seed not in http}
        got: dict[int, list[dict]] = {seed: [] for seed in range(SESSIONS)}
        notes: dict[int, list[dict]] = {seed: [] for seed in range(SESSIONS)}

        def send(seed: int, k: int) -> None:
            if seed in streams:
                if seed not in closed:
                    try:
                        streams[seed].send(clips[seed][k])
                    except ConnectionClosed:
                        closed.add(seed)
                return
            reply = client._json("POST", f"/v1/sessions/{sessions[seed].id}/frames",
                                 content=clips[seed][k], headers={"Content-Type": "image/jpeg"})
            got[seed] += reply["results"]
            notes[seed] += [reply["moved"]] if "moved" in reply else []

        for k in range(half):
            for seed in range(SESSIONS):
                send(seed, k)
        for seed, ws in streams.items():  # every row that can be final before the kill
            while len(got[seed]) < half - 1:
                got[seed].append(ws.recv())
        victim = _replica_of(client, sessions[0].id)
        moved = {seed for seed, s in enumerate(sessions) if _replica_of(client, s.id) == victim}
        assert 0 in moved and len(moved) < SESSIONS
        ray.kill(_replica_actor(victim), no_restart=True)
        for k in range(half, FRAMES):
            for seed in range(SESSIONS):
                send(seed, k)
        for seed, ws in streams.items():
            try:
                got[seed] += ws.finish(timeout=30)
            except ConnectionClosed:
                closed.add(seed)
            ws.__exit__(None, None, None)
        for seed in http:
            got[seed] += sessions[seed].finish()
    for seed in range(SESSIONS):
        rows = [{k: v for k, v in m.items() if k != "type"} for m in got[seed]
                if m.get("type", "result") == "result"]
        if seed not in moved:
            assert notes[seed] == [] and len(rows) == len(got[seed]) and seed not in closed
            assert_rows_equal(rows, expected[seed])
        elif seed in streams and mode == "direct":
            assert seed in closed  # a direct stream ends with its replica
        elif seed in http:
            assert len(notes[seed]) == 1 and notes[seed][0]["replica"] != victim
            lost = notes[seed][0]["lost_frames"]  # the frame of the last, unfinished window
            assert lost is not None and half - 3 <= lost[0] <= lost[1] == half - 1
            assert [r["frame"] for r in rows] == [f for f in range(FRAMES)
                                                  if not lost[0] <= f <= lost[1]]
        else:
            errors = [m for m in got[seed] if m["type"] == "error"]
            assert {m["error"]["code"] for m in errors} == {"replica_lost"}
            answered = sorted([r["frame"] for r in rows] + [m["frame"] for m in errors])
            assert answered == list(range(FRAMES))  # each frame once: a row or an error
            assert rows[-1]["frame"] == FRAMES - 1  # it went on after the kill
        assert_rows_equal(rows[:half - 1], expected[seed][:half - 1])  # before the kill


def _replica_actor(unique_id: str):
    from ray.util import list_named_actors

    for entry in list_named_actors(all_namespaces=True):
        if entry["name"].endswith(f"#{unique_id}"):
            return ray.get_actor(entry["name"], namespace=entry["namespace"])
    raise AssertionError(f"no actor for replica {unique_id}")


def test_a_websocket_at_a_path_with_none_gets_the_json_404(url) -> None:
    """A handshake the ingress refuses (no WebSocket served there) is answered as the single
    worker answers it, through Ray Serve's proxy: 404 with the JSON error (an empty 403 before)."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    with pytest.raises(InvalidStatus) as refused:
        connect(url.replace("http", "ws", 1) + "/v1/nowhere", compression=None, open_timeout=30)
    response = refused.value.response
    assert response.status_code == 404, response
    assert json.loads(response.body)["error"]["code"] == "not_found"


def test_cli_options_are_checked(small_weights: Path) -> None:
    assert parse_autoscale("1:4") == (1, 4) and parse_autoscale(None) is None
    with pytest.raises(UserError, match="MIN:MAX"):
        parse_autoscale("4")
    for bad in ({"autoscale": (0, 2)}, {"autoscale": (3, 2)}, {"replicas": 0}):
        with pytest.raises(UserError):
            RayServeSettings(worker=worker_settings(small_weights), **bad).validate()
    with pytest.raises(UserError, match="gpus-per-replica"):
        RayServeSettings(worker=worker_settings(small_weights, device="cuda")).validate()
    for timeout in (-1.0, float("inf"), float("nan")):
        with pytest.raises(UserError, match="graceful-timeout"):
            RayServeSettings(worker=worker_settings(small_weights),
                             graceful_timeout_s=timeout).validate()
    for percent in (0, 101):
        with pytest.raises(UserError, match="mps-sm-percent"):
            RayServeSettings(worker=worker_settings(small_weights),
                             mps_sm_percent=percent).validate()
    plain = RayServeSettings(worker=worker_settings(small_weights), gpus_per_replica=0.25)
    assert plain.actor_options() == {"num_cpus": 1.0, "num_gpus": 0.25}
    capped = RayServeSettings(worker=worker_settings(small_weights), mps_sm_percent=50)
    assert capped.actor_options()["runtime_env"] == {
        "env_vars": {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}}
    from ray.serve import Application

    from ttball.distributed.serve import app_builder

    app = app_builder({"weights": str(small_weights), "device": "cpu", "replicas": 2,
                       "warmup_batches": "1,2", "mps_sm_percent": 50})
    assert isinstance(app, Application)
    with pytest.raises(UserError, match="unknown ttball serve option"):
        app_builder({"replica": 2})
    with pytest.raises(UserError, match="replicas and autoscale are exclusive"):
        app_builder({"weights": str(small_weights), "replicas": 2, "autoscale": "1:3"})


def test_concurrent_websockets_keep_frame_order(url, expected) -> None:
    """Frames pipelined by two WebSockets at once still come back complete and in order."""
    def one(seed: int) -> list[dict]:
        with Client(url) as client, client.open_session().stream() as ws:
            for png in clip(seed):
                ws.send(png)
            return [{k: v for k, v in m.items() if k != "type"} for m in ws.finish()]

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, range(2)))
    for seed, rows in enumerate(results):
        assert_rows_equal(rows, expected[seed])


def test_sigterm_during_start_up_stops_cleanly(tmp_path: Path) -> None:
    """`ttball serve --ray` signalled while its replica still warms up: the app is deleted,
    its own local cluster stops, exit 0 (Ray's SIGTERM handler used to abort the process)."""
    import subprocess
    import sys
    import time

    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "ttball", "serve", "--ray", "--replicas", "1",
           "--gpus-per-replica", "0", "--cpus-per-replica", "1", "--backend", "eager-fp32",
           "--device", "cpu", "--torch-threads", "1", "--port", str(free_port()),
           "--warmup-batches", "1,2,3,4,5,6,7,8"]  # full size on the CPU: ~10-20 s of warm-up
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while "Started Serve" not in log.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.2)
            time.sleep(1.0)  # deploying: the replica is building and warming up
            proc.terminate()
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert code == 0, text[-2000:]
    assert "stopped during start-up" in text and "ready after" not in text

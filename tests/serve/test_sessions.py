"""The real worker on loopback (uvicorn thread, CPU, the small checkpoint): sessions over HTTP
and WebSocket, and /v1/track, give the rows ``ttball.track`` gives; bad frames get clear 4xx and
disturb nobody."""

from __future__ import annotations

import json
import struct
import time
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from conftest import draw_clip, with_exif_orientation
from one_thread_worker import one_thread_worker
from worker_checks import assert_rows_equal

from ttball.client import ServeError, pack_records
from ttball.frames import FrameSource
from ttball.pipeline import track
from ttball.serve import ServeSettings
from ttball.serve.settings import ApiError
from ttball.serve.uploads import Part, decode, header_size, image_size, jpeg_truncated

FRAMES = 7  # step 3: two full windows and a trailing one; step 1: five windows


@pytest.fixture(scope="module")
def clip7(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "clip7.mp4"
    draw_clip(path, frames=FRAMES)
    return path


@pytest.fixture(scope="module")
def server(small_weights):
    settings = ServeSettings(weights=str(small_weights), device="cpu", warmup_batches=(1, 2),
                             torch_threads=1, max_frame_bytes=300_000, max_body_bytes=1_000_000,
                             max_frame_pixels=1_000_000)
    with one_thread_worker(settings) as client:
        yield client


@pytest.fixture(scope="module")
def reference(clip7, small_weights):
    """What ``ttball track`` gives, per step."""
    return {step: [r.as_dict() for r in track(clip7, weights=small_weights, device="cpu",
                                              step=step).rows] for step in (1, 3)}


@pytest.fixture(scope="module")
def pngs(clip7):
    """The clip's frames, lossless, as the server will decode them."""
    return [cv2.imencode(".png", cv2.cvtColor(f.rgb, cv2.COLOR_RGB2BGR))[1].tobytes()
            for f in FrameSource(clip7)]


def test_reference_is_not_trivial(reference) -> None:
    assert any(r["visible"] for r in reference[3]) and any(r["visible"] for r in reference[1])


def test_http_frames_one_by_one_equal_track(server, pngs, reference) -> None:
    session = server.open_session(step=3, fps=30)
    rows = []
    for png in pngs:
        rows += session.send(png)
    assert [r["frame"] for r in rows] == list(range(FRAMES - 1))  # the last waits for finish
    rows += session.finish()
    assert_rows_equal(rows, reference[3])
    with pytest.raises(ServeError) as err:
        session.describe()
    assert err.value.status == 404  # finish closed it


def test_records_body_and_raw_rgb_equal_track(server, pngs, clip7, reference) -> None:
    session = server.open_session(step=1, fps=30)
    rows = session.send_many(pngs[:4]) + session.send_many(pngs[4:]) + session.finish()
    assert_rows_equal(rows, reference[1])
    raw = np.stack([f.rgb for f in FrameSource(clip7)])
    session = server.open_session(step=3, fps=30)
    h, w = raw.shape[1:3]
    rows = []
    for chunk in (raw[:4], raw[4:]):  # k frames per body: k·W·H·3 bytes
        reply = server.http.post(f"/v1/sessions/{session.id}/frames", content=chunk.tobytes(),
                                 params={"width": w, "height": h},
                                 headers={"Content-Type": "application/octet-stream"})
        assert reply.status_code == 200, reply.text
        rows += reply.json()["results"]
    assert_rows_equal(rows + session.finish(), reference[3])


def test_websocket_stream_equals_track(server, pngs, reference) -> None:
    session = server.open_session(step=1, fps=30)
    with session.stream() as ws:
        for png in pngs:
            ws.send(png)  # no waiting: the server pipelines
        messages = ws.finish()
    assert all(m["type"] == "result" for m in messages), messages
    assert_rows_equal(messages, reference[1])


def test_track_endpoint_streams_ndjson_equal_to_track(server, clip7, reference) -> None:
    lines = list(server.track(clip7, step=3))
    assert "summary" in lines[-1] and lines[-1]["summary"]["frames"] == FRAMES
    assert_rows_equal(lines[:-1], reference[3])


def _png_header(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))


def _post(server, sid, body, kind="image/png", **params):
    return server.http.post(f"/v1/sessions/{sid}/frames", content=body, params=params,
                            headers={"Content-Type": kind})


BAD_FRAMES = [
    pytest.param(b"", "image/png", {}, 400, "empty_frame", id="empty"),
    pytest.param(b"GIF89a not really", "image/jpeg", {}, 400, "not_an_image", id="not-an-image"),
    pytest.param(b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "image/png", {}, 400, "not_an_image",
                 id="corrupt-png"),
    pytest.param(b"\0" * 10, "application/octet-stream", {"width": 4, "height": 4}, 400,
                 "wrong_shape", id="raw-wrong-shape"),
    pytest.param(b"\0" * 10, "application/octet-stream", {}, 400, "wrong_shape", id="raw-no-size"),
    pytest.param(_png_header(100_000, 100_000), "image/png", {}, 413, "frame_too_large",
                 id="huge-dimensions"),
    pytest.param(b"\0" * 400_000, "image/jpeg", {}, 413, "frame_too_large", id="frame-bytes"),
    pytest.param(b"\0" * 1_100_000, "image/jpeg", {}, 413, "body_too_large", id="body-bytes"),
    pytest.param(b"\0\0\0\x09abc", "application/x-ttball-frames", {}, 400, "bad_body",
                 id="truncated-record"),
    pytest.param(b"hello", "text/plain", {}, 415, "unsupported_media_type", id="media-type"),
]


@pytest.mark.parametrize(("body", "kind", "params", "status", "code"), BAD_FRAMES)
def test_bad_frames_get_4xx_and_disturb_nobody(server, pngs, body, kind, params, status,
                                               code) -> None:
    session = server.open_session(step=3)
    assert _post(server, session.id, pngs[0]).status_code == 200
    reply = _post(server, session.id, body, kind, **params)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == code and error["message"]
    rows = session.send(pngs[1]) + session.send(pngs[2]) + session.send(pngs[3])
    assert [r["frame"] for r in rows] == [0, 1, 2]  # the bad frame took no frame number
    session.delete()


def test_frame_size_order_and_unknown_session(server, pngs) -> None:
    session = server.open_session(step=3)
    session.send(pngs[0])
    small = cv2.imencode(".png", np.zeros((10, 20, 3), np.uint8))[1].tobytes()
    reply = _post(server, session.id, small)
    assert reply.status_code == 422 and reply.json()["error"]["code"] == "frame_size"
    reply = _post(server, session.id, pngs[1], frame=0)
    assert reply.status_code == 409 and reply.json()["error"]["code"] == "frame_order"
    assert _post(server, session.id, pngs[1], frame=5).json()["last_frame"] == 5
    fixed = server.open_session(width=64, height=32)
    assert _post(server, fixed.id, pngs[0]).json()["error"]["code"] == "frame_size"
    reply = _post(server, "no-such-session", pngs[0])
    assert reply.status_code == 404 and reply.json()["error"]["code"] == "unknown_session"
    assert server.http.delete("/v1/sessions/no-such-session").status_code == 404
    reply = server.http.post("/v1/sessions", json={"step": 2})
    assert reply.status_code == 422 and reply.json()["error"]["code"] == "bad_options"
    reply = server.http.post("/v1/sessions", content=b"{not json")
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "bad_json"
    session.delete()
    fixed.delete()


def test_websocket_bad_frame_and_disconnect_cleanup(server, pngs) -> None:
    session = server.open_session(step=3)
    with session.stream() as ws:
        ws.send(pngs[0])
        ws.send(b"not an image")
        message = ws.recv()
        assert message["type"] == "error" and message["frame"] == 1
        assert message["error"]["code"] == "not_an_image"
        ws.send(pngs[1])
        ws.send(pngs[2])  # frame 3 after the refused frame 1: a window (0, 2, 3) completes
        first = ws.recv()
        assert first["type"] == "result" and first["frame"] == 0
    # The client went away mid-stream: the session is removed, its windows dropped.
    deadline = time.monotonic() + 10
    while server.http.get(f"/v1/sessions/{session.id}").status_code != 404:
        assert time.monotonic() < deadline, "session not cleaned up after disconnect"
        time.sleep(0.05)


def test_websocket_to_unknown_session_is_closed_with_reason(server) -> None:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with connect(server.url.replace("http", "ws") + "/v1/sessions/nope/stream") as ws:
        message = json.loads(ws.recv(10))
        assert message["error"]["code"] == "unknown_session"
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(10)
    assert closed.value.rcvd.code == 4404


def test_metrics_report_stages_and_batches(server, pngs) -> None:
    """Each counter named below is fed here (the error counter by a refused frame), whatever
    ran before on this module's server."""
    session = server.open_session()
    for png in pngs[:3]:
        session.send(png)
    with pytest.raises(ServeError, match="not_an_image"):
        session.send(b"GIF89a not really")
    session.delete()
    text = server.metrics()
    for name in ("ttball_stage_seconds_bucket{le=\"0.01\",stage=\"decode\"}",
                 'stage="queue"', 'stage="network"', 'stage="post"', "ttball_batch_size_bucket",
                 "ttball_window_seconds_count", "ttball_queue_depth", "ttball_frames_total",
                 "ttball_frames_per_second", "ttball_sessions", "ttball_ready 1.0",
                 'ttball_warmup_seconds{batch="2"}', 'ttball_startup_seconds{phase="total"}',
                 'ttball_errors_total{kind="not_an_image"}',
                 'ttball_requests_total{method="POST",route="/v1/sessions/{sid}/frames",status="200"}'):
        assert name in text, name


def test_image_size_reads_png_and_jpeg_headers() -> None:
    img = np.zeros((33, 47, 3), np.uint8)
    assert image_size(cv2.imencode(".png", img)[1].tobytes()) == (47, 33)
    assert image_size(cv2.imencode(".jpg", img)[1].tobytes()) == (47, 33)
    assert image_size(b"nope") is None
    assert pack_records([b"ab", b"c"]) == b"\0\0\0\x02ab\0\0\0\x01c"


def test_a_jpeg_cut_short_is_found_as_opencv_finds_it() -> None:
    """A JPEG without its end-of-image marker after the scan is refused by OpenCV; the check
    says so for the same bytes (and not for trailing bytes, nor for a thumbnail's marker)."""
    rng = np.random.default_rng(0)
    data = cv2.imencode(".jpg", rng.integers(0, 256, (33, 47, 3), np.uint8))[1].tobytes()
    scan = data.find(b"\xff\xda")
    thumbnail = b"\xff\xd8\xff\xda\x00\x02\xff\xd9"  # its own scan and end, inside APP1
    app1 = b"\xff\xe1" + (2 + len(thumbnail)).to_bytes(2, "big") + thumbnail
    cases = {"whole": (data, False), "trailing bytes": (data + b"tail", False),
             "last two bytes cut": (data[:-2], True), "half": (data[: len(data) // 2], True),
             "no scan": (data[:scan], True),
             "thumbnail, then cut": (data[:2] + app1 + data[2: len(data) // 2], True),
             "thumbnail, whole": (data[:2] + app1 + data[2:], False)}
    for name, (body, truncated) in cases.items():
        assert jpeg_truncated(body) is truncated, name
        decoded = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
        assert (decoded is None) is truncated, name
    settings = ServeSettings()
    assert header_size(Part(data), settings) == (47, 33)
    with pytest.raises(ApiError, match="end-of-image") as caught:
        header_size(Part(data[:-2]), settings)
    assert (caught.value.status, caught.value.code) == (400, "not_an_image")


def test_an_exif_orientation_is_not_applied_the_frame_is_used_as_stored() -> None:
    """OpenCV turns a JPEG by its EXIF orientation unless told not to; the GPU decoders and the
    header's size don't. The host path decodes it as stored, so the frame is the same
    whichever path takes it, and of the size the header gives."""
    img = np.zeros((33, 47, 3), np.uint8)
    img[:, :10] = 255  # a white band on the left: on top once turned
    settings = ServeSettings()
    for ext in (".jpg", ".png"):  # a PNG's eXIf chunk is read by OpenCV too
        turned = with_exif_orientation(cv2.imencode(ext, img)[1].tobytes(), 6)
        assert cv2.imdecode(np.frombuffer(turned, np.uint8), cv2.IMREAD_COLOR).shape == (47, 33, 3)
        rgb = decode(Part(turned), settings)
        assert header_size(Part(turned), settings) == (47, 33) and rgb.shape == (33, 47, 3), ext
        assert rgb[:, :8].min() > 200 and rgb[:, 12:].max() < 50, ext  # the band still left


BAD_OPTIONS = [
    pytest.param(b'{"dedup_ssim": NaN}', 400, "bad_json", id="nan"),
    pytest.param(b'{"dedup_ssim": Infinity}', 400, "bad_json", id="infinity"),
    pytest.param(b'{"step": 1e999}', 400, "bad_json", id="past-float-range"),
    pytest.param(b"[" * 20_000 + b"]" * 20_000, 400, "bad_json", id="nested-too-deep"),
    # Python kept the last "step", a proxy or log reader with another parser the first
    pytest.param(b'{"step": 1, "step": 3}', 400, "bad_json", id="key-twice"),
    pytest.param(b'{"dedup_ssim": -1}', 422, "bad_options", id="dedup-negative"),
    pytest.param(b'{"dedup_ssim": 5}', 422, "bad_options", id="dedup-over-1"),
    pytest.param(b'{"step": true}', 422, "bad_options", id="step-bool"),
    pytest.param(b'{"step": 3.9}', 422, "bad_options", id="step-fraction"),
    pytest.param(b'{"step": "3"}', 422, "bad_options", id="step-string"),
    pytest.param(b'{"width": 1280.7, "height": 720}', 422, "bad_options", id="width-fraction"),
    pytest.param(b'{"width": 1e12, "height": 1e12}', 422, "bad_options", id="width-huge"),
    pytest.param(b'{"threshold": "0.5"}', 422, "bad_options", id="threshold-string"),
    pytest.param(b'{"step": "' + b"x" * 50_000 + b'"}', 422, "bad_options", id="long-string"),
    # a frame's time is index / fps: a subnormal rate made it infinite (Infinity on the socket)
    pytest.param(b'{"fps": 1e-320}', 422, "bad_options", id="fps-subnormal"),
    pytest.param(b'{"fps": 0.0001}', 422, "bad_options", id="fps-below-the-least"),
    pytest.param(b'{"dedup_ssim": []}', 422, "bad_options", id="dedup-empty-list"),
    pytest.param(b'{"dedup_ssim": {}}', 422, "bad_options", id="dedup-empty-object"),
]


@pytest.mark.parametrize(("body", "status", "code"), BAD_OPTIONS)
def test_bad_session_options_get_4xx_and_open_no_session(server, body, status, code) -> None:
    before = len(server.http.get("/v1/sessions").json()["sessions"])
    reply = server.http.post("/v1/sessions", content=body,
                             headers={"Content-Type": "application/json"})
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["code"] == code
    assert len(reply.json()["error"]["message"]) < 500
    assert len(server.http.get("/v1/sessions").json()["sessions"]) == before


def test_a_bad_option_value_is_named_in_its_message() -> None:
    """Messages said "expected a number, got '0.5'" (which option?) or, for a list, Python's
    "float() argument must be a string or a real number"."""
    from ttball.serve.sessions import SessionOptions

    for data, named in (({"threshold": "0.5"}, "threshold must be a number"),
                        ({"dedup": []}, "dedup must be a number"),
                        ({"dedup_ssim": "yes"}, "dedup must be a number"),
                        ({"fps": {}}, "fps must be a number"),
                        ({"width": "64", "height": 32}, "width must be a number"),
                        ({"threshold": float("nan")}, "threshold must be a finite number")):
        with pytest.raises(ApiError) as refused:
            SessionOptions.from_json(data)
        assert refused.value.code == "bad_options" and named in refused.value.message, data


def test_whole_float_sizes_and_dedup_off_are_still_options(server) -> None:
    reply = server.http.post("/v1/sessions", json={"step": 1.0, "width": 64.0, "height": 32,
                                                   "dedup": False})
    assert reply.status_code == 201, reply.text
    body = reply.json()
    assert (body["step"], body["width"], body["height"]) == (1, 64, 32)
    server.http.delete(f"/v1/sessions/{body['id']}")


def test_frame_numbers_and_times_must_be_finite_and_in_range(server, pngs) -> None:
    session = server.open_session(step=3)
    for params, code in (({"t": "nan"}, "bad_time"), ({"t": "inf"}, "bad_time"),
                         ({"t": "-inf"}, "bad_time"), ({"frame": "1" + "0" * 400}, "bad_frame_number"),
                         ({"frame": -1}, "bad_frame_number")):
        reply = _post(server, session.id, pngs[0], **params)
        assert reply.status_code == 400 and reply.json()["error"]["code"] == code, params
    rows = session.send(pngs[0]) + session.send(pngs[1]) + session.send(pngs[2])
    assert [r["frame"] for r in rows] == [0, 1, 2]  # refused pushes took no frame number
    session.delete()
    last = 2**53 - 1  # the last exact frame number: taken, and none numbered after it
    session = server.open_session(step=1)
    session.send(pngs[0], frame=last)
    for body, kind in ((pngs[1], "image/png"),
                       (pack_records(pngs[1:3]), "application/x-ttball-frames")):
        reply = _post(server, session.id, body, kind)
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["code"] == "bad_frame_number"
    session.delete()


def test_unknown_routes_and_long_ids_get_the_error_shape(server) -> None:
    reply = server.http.get("/v1/nothing-here")
    assert reply.status_code == 404 and reply.json()["error"]["code"] == "not_found"
    reply = server.http.put("/v1/sessions")
    assert reply.status_code == 405 and reply.json()["error"]["code"] == "method_not_allowed"
    reply = server.http.get(f"/v1/sessions/{'x' * 60_000}")
    assert reply.status_code == 404 and len(reply.content) < 500


def test_websocket_deeply_nested_text_is_a_bad_message_and_the_stream_goes_on(server,
                                                                              pngs) -> None:
    session = server.open_session(step=3)
    with session.stream() as ws:
        ws.send(pngs[0])
        ws.ws.send("[" * 100_000)
        message = ws.recv()
        assert message["type"] == "error" and message["error"]["code"] == "bad_message"
        for png in pngs[1:4]:
            ws.send(png)
        first = ws.recv()
        assert first["type"] == "result" and first["frame"] == 0
    session_gone = server.http.get(f"/v1/sessions/{session.id}")
    assert session_gone.status_code in (200, 404)


def test_track_endpoint_refuses_a_video_it_cannot_track_before_its_response(
        server, pngs, tmp_path) -> None:
    """A video of fewer than 3 readable frames was a 200 whose one NDJSON line was the error;
    frames over the worker's pixel limit were tracked (``/frames`` refuses them: 413); a
    declared body over the size limit was read to its end before the 413. All are 4xx now,
    before any row, and no spooled file is left."""
    import socket
    import tempfile
    from urllib.parse import urlsplit

    def spooled():
        return sorted(Path(tempfile.gettempdir()).glob("ttball-track-*"))

    before = spooled()
    two = tmp_path / "two.mp4"
    draw_clip(two, frames=2)
    for body, kind in ((pngs[0], "image/png"), (two.read_bytes(), "video/mp4")):
        reply = server.http.post("/v1/track", content=body, headers={"Content-Type": kind})
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["code"] == "video_too_short"
    big = tmp_path / "big.avi"  # 4 frames of 1,200 x 1,000: the test worker allows 1 MP
    writer = cv2.VideoWriter(str(big), cv2.VideoWriter_fourcc(*"MJPG"), 30, (1200, 1000))
    for _ in range(4):
        writer.write(np.zeros((1000, 1200, 3), np.uint8))
    writer.release()
    reply = server.http.post("/v1/track", content=big.read_bytes(),
                             headers={"Content-Type": "video/x-msvideo"})
    assert reply.status_code == 413, reply.text
    assert reply.json()["error"]["code"] == "frame_too_large" and "1200x1000" in reply.text
    where = urlsplit(server.url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/track HTTP/1.1\r\nHost: x\r\nContent-Type: video/mp4\r\n"
                     b"Content-Length: 3000000000\r\n\r\n")  # and no body: 413 at once
        head = sock.recv(4096).split(b"\r\n", 1)[0]
    assert head == b"HTTP/1.1 413 Request Entity Too Large", head
    assert spooled() == before


def test_a_png_without_its_ihdr_chunk_is_not_an_image() -> None:
    assert image_size(b"\x89PNG\r\n\x1a\n" + b"\xff" * 40) is None
    assert image_size(_png_header(47, 33)) == (47, 33)


def test_a_websocket_session_can_be_neither_deleted_nor_finished_over_http(server, pngs) -> None:
    """The socket holds its session for its whole life: a DELETE used to cancel its steps under
    it (its client heard nothing more, then lost the connection) and a finish used to wait as
    long as the socket lived. Both are 409 now, and the stream goes on."""
    session = server.open_session(step=3)
    with session.stream() as ws:
        ws.send(pngs[0])
        for reply in (server.http.delete(f"/v1/sessions/{session.id}"),
                      server.http.post(f"/v1/sessions/{session.id}/finish", timeout=10),
                      _post(server, session.id, pngs[1])):
            assert reply.status_code == 409, reply.text
            assert reply.json()["error"]["code"] == "session_busy"
        for png in pngs[1:4]:
            ws.send(png)
        messages = ws.finish()
    assert [m["frame"] for m in messages] == [0, 1, 2, 3]
    assert server.http.get(f"/v1/sessions/{session.id}").status_code == 404


def test_a_frame_of_the_wrong_size_is_refused_before_any_is_decoded(server, pngs,
                                                                   monkeypatch) -> None:
    """Sizes come from the headers first: a body of many large frames for a session of small
    ones is refused without decoding them (eight 8K PNGs took 6 s and 1.25 GB before)."""
    from ttball.serve import sessions

    session = server.open_session(step=3)
    session.send(pngs[0])
    decoded: list[int] = []
    real = sessions.decode
    monkeypatch.setattr(sessions, "decode", lambda part, settings: decoded.append(1)
                        or real(part, settings))
    big = cv2.imencode(".png", np.zeros((300, 500, 3), np.uint8))[1].tobytes()
    reply = _post(server, session.id, pack_records([pngs[1], big, big]),
                  "application/x-ttball-frames")
    assert reply.status_code == 422 and reply.json()["error"]["code"] == "frame_size"
    assert decoded == []
    assert [r["frame"] for r in session.send(pngs[1]) + session.send(pngs[2])] == [0, 1, 2]
    assert decoded == [1, 1]
    session.delete()

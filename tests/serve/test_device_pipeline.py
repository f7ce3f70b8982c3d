"""``ttball serve --device-pipeline`` on loopback, CPU (GpuPipeline with CPU tensors and cv2
decode), the small checkpoint: JPEG sessions over HTTP and WebSocket give the rows of the
default mode and of ``ttball track`` on the same JPEG files; bad frames get clear 4xx and
disturb nobody (also when they share a push); batching, 429, readiness and SIGTERM as in the
default mode."""

from __future__ import annotations

import dataclasses
import textwrap
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import cv2
import numpy as np
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from conftest import draw_clip
from gated_backend import GatedBackend
from worker_checks import assert_rows_equal, assert_sigterm_finishes_in_flight

from ttball.backends import create
from ttball.client import Client, ServeError, pack_records
from ttball.errors import UserError
from ttball.frames import FrameSource
from ttball.pipeline import track
from ttball.serve import ServeSettings, create_app
from ttball.serve.app import serve_in_thread
from ttball.serve.device import FLUSH_STAGES, DevicePath, FrameRefused, Upload
from ttball.serve.metrics import Metrics
from ttball.serve.settings import ApiError

FRAMES = 7  # step 3: two full windows and a trailing one; step 1: five windows


def jpeg(rgb: np.ndarray) -> bytes:
    return cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                        [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()


@pytest.fixture(scope="module")
def jpeg_dir(tmp_path_factory):
    """The clip's frames as JPEG files (what ``ttball track`` reads as a folder of images)."""
    root = tmp_path_factory.mktemp("jpegs")
    draw_clip(root / "clip.mp4", frames=FRAMES)
    folder = root / "frames"
    folder.mkdir()
    for f in FrameSource(root / "clip.mp4"):
        (folder / f"{f.index:04d}.jpg").write_bytes(jpeg(f.rgb))
    return folder


@pytest.fixture(scope="module")
def jpegs(jpeg_dir):
    return [p.read_bytes() for p in sorted(jpeg_dir.glob("*.jpg"))]


@pytest.fixture(scope="module")
def reference(jpeg_dir, small_weights):
    """``ttball track`` on the same JPEG files, per step (30 fps, as the sessions)."""
    return {step: [r.as_dict() for r in track(jpeg_dir, weights=small_weights, device="cpu",
                                              step=step).rows] for step in (1, 3)}


@pytest.fixture(scope="module")
def servers(small_weights):
    """The default mode and the device pipeline, same weights and settings otherwise."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    base = {"weights": str(small_weights), "device": "cpu", "warmup_batches": (1, 2),
            "torch_threads": 1, "max_frame_bytes": 300_000, "max_body_bytes": 1_000_000}
    try:
        with serve_in_thread(create_app(ServeSettings(**base))) as host_url, \
                serve_in_thread(create_app(ServeSettings(**base, device_pipeline=True))) as dev_url, \
                serve_in_thread(create_app(ServeSettings(**base, device_pipeline=True,
                                                         pipeline_overlap=True))) as lap_url, \
                Client(host_url) as host, Client(dev_url) as device, Client(lap_url) as overlap:
            for client in (host, device, overlap):
                client.wait_ready(timeout=90, poll=0.1)
            yield {"host": host, "device": device, "overlap": overlap}
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def laned(small_weights):
    """--pipeline-lanes 2, without and with overlap (each lane's idle flush on its thread; with
    --no-carry-windows and --max-delay-ms 0: a push never waits for company), the same with
    each lane's flush on a thread of its own (--flush-thread), the same with each lane's flush
    run by its thread right after a push (--flush-after-push; windows carried), and
    with overlap and each lane's decoder in two processes of its own, decoding ahead (sent
    before a push waits for its own: --decode-early), each lane handed its next full batch
    while one runs (--batches-ahead 1), a push's windows past its full calls carried to the next
    (--carry-windows), and with overlap and each lane's frames decoded on a thread of its own as
    they arrive (--decode-on-arrival)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    base = {"weights": str(small_weights), "device": "cpu", "warmup_batches": (1, 2),
            "torch_threads": 1, "max_frame_bytes": 300_000, "max_body_bytes": 1_000_000,
            "device_pipeline": True, "pipeline_lanes": 2}
    try:
        with serve_in_thread(create_app(ServeSettings(**base))) as lanes_url, \
                serve_in_thread(create_app(ServeSettings(**base, pipeline_overlap=True,
                                                         pipeline_carry=False,
                                                         max_delay_ms=0))) as lap_url, \
                serve_in_thread(create_app(ServeSettings(**base, pipeline_overlap=True,
                                                         pipeline_carry=False, max_delay_ms=0,
                                                         pipeline_flush_thread=True))) as f_url, \
                serve_in_thread(create_app(ServeSettings(
                    **base, pipeline_overlap=True, pipeline_flush_after_push=True))) as a_url, \
                serve_in_thread(create_app(ServeSettings(**base, pipeline_overlap=True,
                                                         pipeline_decode_processes=2,
                                                         pipeline_decode_ahead=True,
                                                         pipeline_decode_early=True,
                                                         pipeline_carry=True,
                                                         batches_ahead=1))) as p_url, \
                serve_in_thread(create_app(ServeSettings(
                    **base, pipeline_overlap=True, pipeline_decode_on_arrival=True))) as e_url, \
                Client(lanes_url) as lanes, Client(lap_url) as overlap, Client(f_url) as flush, \
                Client(a_url) as after, Client(p_url) as process, Client(e_url) as arrival:
            for client in (lanes, overlap, flush, after, process, arrival):
                client.wait_ready(timeout=90, poll=0.1)
            yield {"lanes": lanes, "lanes-overlap": overlap, "lanes-flush-thread": flush,
                   "lanes-flush-after-push": after, "lanes-decode-processes": process,
                   "lanes-decode-on-arrival": arrival}
    finally:
        torch.set_num_threads(threads)


def _post(client, sid, body, kind="image/jpeg", **params):
    return client.http.post(f"/v1/sessions/{sid}/frames", content=body, params=params,
                            headers={"Content-Type": kind})


def test_reference_is_not_trivial(reference) -> None:
    assert any(r["visible"] for r in reference[3]) and any(r["visible"] for r in reference[1])


@pytest.mark.parametrize("step", [3, 1])
def test_http_frames_equal_track_and_the_default_mode(servers, jpegs, reference, step) -> None:
    got = {}
    for mode, client in servers.items():
        session = client.open_session(step=step, fps=30)
        rows = []
        for data in jpegs:
            rows += session.send(data)
        got[mode] = rows + session.finish()
    assert_rows_equal(got["device"], reference[step])
    assert_rows_equal(got["device"], got["host"])
    assert_rows_equal(got["overlap"], got["host"])


def test_records_bodies_and_explicit_numbers_equal_the_default_mode(servers, jpegs) -> None:
    got = {}
    for mode, client in servers.items():
        session = client.open_session(step=1, fps=30)
        rows = session.send_many(jpegs[:4])
        rows += session.send(jpegs[4], frame=10, t=2.0)  # ?frame= and ?t= are the client's
        rows += session.send(jpegs[5])
        rows += session.send_many(jpegs[6:])
        got[mode] = rows + session.finish()
    assert [r["frame"] for r in got["device"]] == [0, 1, 2, 3, 10, 11, 12]
    assert got["device"][4]["time_s"] == 2.0
    assert_rows_equal(got["device"], got["host"])
    assert_rows_equal(got["overlap"], got["host"])


@pytest.mark.parametrize("mode", ["device", "overlap"])
@pytest.mark.parametrize("step", [1, 3])
def test_websocket_stream_equals_track(servers, jpegs, reference, step, mode) -> None:
    session = servers[mode].open_session(step=step, fps=30)
    with session.stream() as ws:
        for data in jpegs:
            ws.send(data)  # no waiting: frames queue up and share pushes
        messages = ws.finish()
    assert all(m["type"] == "result" for m in messages), messages
    assert_rows_equal(messages, reference[step])


def test_overlap_rows_arrive_without_finishing(servers, jpegs, reference) -> None:
    """--pipeline-overlap: a push's rows wait for the next push, or for the queue to run
    short; a stream that pauses still gets them without finishing."""
    session = servers["overlap"].open_session(step=1, fps=30)
    with session.stream() as ws:
        for data in jpegs[:5]:
            ws.send(data)
        early = [ws.recv(timeout=30) for _ in range(3)]  # frames 0-2 are final once 3 is in
        for data in jpegs[5:]:
            ws.send(data)
        messages = early + ws.finish()
    assert [m["frame"] for m in early] == [0, 1, 2]
    assert_rows_equal(messages, reference[1])


@pytest.mark.parametrize("mode", ["device", "overlap"])
def test_concurrent_sessions_share_pushes(servers, jpegs, reference, mode) -> None:
    client = servers[mode]
    before = _push_counts(client.metrics())

    def one(step: int) -> list[dict]:
        with client.open_session(step=step, fps=30).stream() as ws:
            for data in jpegs:
                ws.send(data)
            return ws.finish()

    steps = [3, 1, 3, 1]
    with ThreadPoolExecutor(len(steps)) as pool:
        results = list(pool.map(one, steps))
    for step, messages in zip(steps, results):
        assert_rows_equal(messages, reference[step])
    pushes, frames = (a - b for a, b in zip(_push_counts(client.metrics()), before))
    assert frames == len(steps) * len(jpegs) and pushes < frames  # some pushes held several


@pytest.mark.parametrize("mode", ["lanes", "lanes-overlap", "lanes-flush-thread",
                                  "lanes-flush-after-push", "lanes-decode-processes",
                                  "lanes-decode-on-arrival"])
def test_lanes_deal_sessions_evenly_and_give_the_rows_of_track(laned, jpegs, reference,
                                                                mode) -> None:
    """--pipeline-lanes 2: sessions are dealt to the lane with the fewest; each lane's pushes
    run on its own thread; every session's rows equal ``ttball track``'s; a bad frame in one
    lane disturbs nobody; closed sessions free their lane. (--decode-processes 2
    --decode-ahead: the same, each lane's pushes decoded in two child processes, a push
    starting the decode of the one queued after it. --decode-on-arrival: each upload's frames
    decoded on the worker's arrival thread (one for both lanes), none by a push; the bad frame's upload left to its
    push, which refuses it.)"""
    client = laned[mode]
    ready = client.readiness()["device_pipeline"]
    assert ready["lanes"] == 2 and ready["lane_sessions"] == [0, 0]
    assert ready["decoder_processes"] == (2 if mode == "lanes-decode-processes" else 0)
    assert (set(ready["decoder_start"] or ()) == {"spawn", "decoder", "ready"}) is (
        mode == "lanes-decode-processes")
    assert ready["decode_ahead"] is (mode == "lanes-decode-processes")
    assert ready["decode_early"] is (mode == "lanes-decode-processes")
    arrival = mode == "lanes-decode-on-arrival"
    assert ready["decode_on_arrival"] is arrival
    assert ready["arrival_decoder"] == ("cv2" if arrival else None)
    assert ready["carry_windows"] is (mode in ("lanes-decode-processes", "lanes-flush-after-push",
                                               "lanes-decode-on-arrival"))
    assert ready["flush_thread"] is (mode == "lanes-flush-thread")
    assert ready["flush_after_push"] is (mode == "lanes-flush-after-push")
    assert ready["graphs_frozen"] is True and ready["uncaptured_calls"] == 0
    steps = [3, 1, 3, 1]
    sessions = [client.open_session(step=step, fps=30) for step in steps]
    assert client.readiness()["device_pipeline"]["lane_sessions"] == [2, 2]
    bad = _post(client, sessions[1].id, corrupt(jpegs))
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "not_an_image"

    def one(session) -> list[dict]:
        with session.stream() as ws:
            for data in jpegs:
                ws.send(data)
            return ws.finish()

    with ThreadPoolExecutor(len(steps)) as pool:
        results = list(pool.map(one, sessions))
    for step, messages in zip(steps, results):
        assert_rows_equal(messages, reference[step])
    metrics = client.metrics()
    for part in ("child", "fill", "transfer", "to_child", "from_child", "copy_out"):
        split = f'ttball_push_seconds_count{{stage="decode_{part}"}}'  # the decode stage's parts
        assert (split in metrics) is (mode == "lanes-decode-processes")
    assert ('ttball_decode_ahead_total{result="hit"}' in metrics) is (mode == "lanes-decode-processes")
    # every frame pushed was decoded on arrival (the warm-up's pushes are not counted)
    early = _sample(metrics, 'ttball_arrival_frames_total{where="arrival"}')
    assert early == (len(steps) * len(jpegs) if arrival else 0)
    assert _sample(metrics, 'ttball_arrival_frames_total{where="push"}') == 0
    assert ('ttball_push_seconds_count{stage="arrival_wait"}' in metrics) is arrival
    # the arrival decoder's batches: every frame in one, each timed
    batched = _sample(metrics, "ttball_arrival_batch_frames_sum")
    assert batched == early and (_sample(metrics, "ttball_arrival_batch_seconds_count") > 0) is (
        arrival)
    # the flushes (with overlap: each lane's, on its thread or, --flush-thread, one of its own),
    # each whole call timed on its thread
    assert ('ttball_stage_seconds_count{stage="idle"}' in metrics) is (mode != "lanes")
    flush_call = _sample(metrics, 'ttball_flush_seconds_total{stage="call"}')
    flush_cpu = _sample(metrics, 'ttball_flush_seconds_total{stage="call_cpu"}')
    assert (flush_call > 0) is (mode != "lanes") and 0 <= flush_cpu <= flush_call + 0.05
    # each batch as the event loop sees it and on its lane's thread
    assert _sample(metrics, 'ttball_stage_seconds_count{stage="batch"}') == _sample(
        metrics, 'ttball_stage_seconds_count{stage="thread"}') > 0
    flushers = {t.name.rsplit("_", 1)[0] for t in threading.enumerate()} & {
        "ttball-flush-0", "ttball-flush-1"}
    if mode == "lanes-flush-thread":
        assert flushers == {"ttball-flush-0", "ttball-flush-1"}
    if arrival:  # one arrival thread for the worker's two lanes
        assert [t.name for t in threading.enumerate()].count("decode-arrival") == 1
    ready = client.readiness()["device_pipeline"]
    assert ready["lane_sessions"] == [0, 0]  # streams ended
    # how many pushes had another queued behind them varies: the counts are there, summed
    counted = {"decode_ahead_hits", "decode_ahead_misses"} <= ready.keys()
    assert counted is (mode == "lanes-decode-processes")
    first, second = client.open_session(), client.open_session()
    first.delete()
    assert client.readiness()["device_pipeline"]["lane_sessions"] in ([0, 1], [1, 0])
    third = client.open_session()  # into the lane the deleted one freed
    assert client.readiness()["device_pipeline"]["lane_sessions"] == [1, 1]
    second.delete()
    third.delete()
    assert client.readiness()["device_pipeline"]["lane_sessions"] == [0, 0]


def test_lanes_run_on_threads_of_their_own(laned) -> None:
    """Each lane's backend thread exists beside lane 0's (the worker's threads by name)."""
    names = {t.name.rsplit("_", 1)[0] for t in threading.enumerate()}
    assert {"ttball-backend", "ttball-backend-1"} <= names


def _push_counts(text: str) -> tuple[float, float]:
    return _sample(text, "ttball_push_frames_count"), _sample(text, "ttball_push_frames_sum")


def _sample(text: str, name: str) -> float:
    """One sample's value from a metrics page, 0 when it is not there."""
    prefix = name + " "
    return next((float(line[len(prefix):]) for line in text.splitlines()
                 if line.startswith(prefix)), 0.0)


def corrupt(jpegs):
    return jpegs[0][: len(jpegs[0]) // 2]  # the header reads fine; the data stops half-way


def bad_scan(jpegs):
    """The first frame with its scan naming a component its header lacks: complete, its size
    readable, refused only by the decoder (in the push)."""
    data = bytearray(jpegs[0])
    data[data.find(b"\xff\xda") + 5] = 0x77
    return bytes(data)


def other_size(_):
    return jpeg(np.zeros((36, 64, 3), np.uint8))


def png(jpegs):
    """The first frame as a PNG (the session's size)."""
    return cv2.imencode(".png", cv2.imdecode(np.frombuffer(jpegs[0], np.uint8),
                                             cv2.IMREAD_COLOR))[1].tobytes()


BAD_FRAMES = [
    pytest.param(corrupt, "image/jpeg", {}, 400, "not_an_image", id="truncated-jpeg"),
    pytest.param(bad_scan, "image/jpeg", {}, 400, "not_an_image", id="undecodable-jpeg"),
    pytest.param(other_size, "image/jpeg", {}, 422, "frame_size", id="other-size"),
    pytest.param(lambda _: b"GIF89a not really", "image/jpeg", {}, 400, "not_an_image",
                 id="not-an-image"),
    pytest.param(png, "image/png", {}, 415, "unsupported_media_type", id="png"),
    pytest.param(lambda _: b"\0" * (64 * 36 * 3), "application/octet-stream",
                 {"width": 64, "height": 36}, 415, "unsupported_media_type", id="raw-rgb"),
    pytest.param(lambda j: pack_records([j[1], corrupt(j)]), "application/x-ttball-frames", {},
                 400, "not_an_image", id="records-all-or-nothing"),
    pytest.param(lambda j: pack_records([j[1], bad_scan(j)]), "application/x-ttball-frames", {},
                 400, "not_an_image", id="records-refused-in-the-push"),
]


@pytest.mark.parametrize(("make", "kind", "params", "status", "code"), BAD_FRAMES)
def test_bad_frames_get_4xx_and_disturb_nobody(servers, jpegs, make, kind, params, status,
                                               code) -> None:
    client = servers["device"]
    session = client.open_session(step=3)
    assert _post(client, session.id, jpegs[0]).status_code == 200
    reply = _post(client, session.id, make(jpegs), kind, **params)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == code and error["message"]
    rows = session.send(jpegs[1]) + session.send(jpegs[2]) + session.send(jpegs[3])
    assert [r["frame"] for r in rows] == [0, 1, 2]  # the bad frame took no frame number
    session.delete()


def test_websocket_bad_frames_are_reported_in_order_like_the_default_mode(servers, jpegs) -> None:
    sequence = [jpegs[0], corrupt(jpegs), jpegs[1], other_size(jpegs), jpegs[2], jpegs[3],
                png(jpegs), jpegs[4]]
    got = {}
    for mode, client in servers.items():
        with client.open_session(step=3, fps=30).stream() as ws:
            for data in sequence:
                ws.send(data)
            got[mode] = ws.finish()
    # PNG is a frame on the host path, a 415 on the device pipeline
    assert ("error", 6) in [(m["type"], m.get("frame")) for m in got["device"]]
    kinds = [(m["type"], m.get("frame"), m.get("error", {}).get("code")) for m in got["device"]]
    assert ("error", 1, "not_an_image") in kinds and ("error", 3, "frame_size") in kinds
    rows = [m for m in got["device"] if m["type"] == "result"]
    host_rows = [m for m in got["host"] if m["type"] == "result" and m["frame"] != 6]
    assert [r["frame"] for r in rows] == [0, 2, 4, 5, 7]  # refused frames used up their numbers
    # the host path takes the PNG frame 6 into its stream: compare the rows before it
    assert_rows_equal(rows[:3], host_rows[:3])
    host_kinds = [(m["type"], m.get("frame"), m.get("error", {}).get("code"))
                  for m in got["host"] if m["type"] == "error"]
    assert host_kinds == [k for k in kinds if k[0] == "error" and k[1] != 6]


def test_dedup_sessions_and_track_keep_the_host_path(servers, jpegs, jpeg_dir) -> None:
    got = {}
    for mode, client in servers.items():
        session = client.open_session(step=3, fps=30, dedup_ssim=0.99)
        got[mode] = session.send_many(jpegs[:3] + [jpegs[2]] + jpegs[3:]) + session.finish()
    assert_rows_equal(got["device"], got["host"])
    assert len(got["device"]) == FRAMES + 1
    # a PNG is fine there: the host path decodes it
    session = servers["device"].open_session(dedup_ssim=0.99)
    assert session.send(png(jpegs)) == []
    session.delete()


def test_readiness_info_and_metrics(servers, jpegs) -> None:
    client = servers["device"]
    assert client.readiness()["device_pipeline"]["decoder"] == "cv2"
    assert client.readiness()["device_pipeline"]["overlap"] is False
    assert client.readiness()["device_pipeline"]["lanes"] == 1
    assert client.readiness()["device_pipeline"]["graphs_frozen"] is False  # one lane: lazy
    assert client.readiness()["device_pipeline"]["compile_resize"] is False
    assert client.readiness()["device_pipeline"]["resize"] == "eager"
    assert client.readiness()["device_pipeline"]["fused_windows"] == 0  # no Triton path on a CPU
    assert servers["overlap"].readiness()["device_pipeline"]["overlap"] is True
    assert servers["host"].readiness()["device_pipeline"] is None
    # the pipeline's set-up (its decoder) and its warm-up are start-up phases of their own,
    # after the network's warm-up
    assert client.readiness()["startup_seconds"]["pipeline"] >= 0
    seconds = client.readiness()["startup_seconds"]
    assert seconds["pipeline_warmup"] > 0 and seconds["warmup"] > 0
    assert client.readiness()["device_pipeline"]["decoder_start"] is None  # no children
    assert "pipeline" not in servers["host"].readiness()["startup_seconds"]
    session = client.open_session()
    for data in jpegs[:4]:
        session.send(data)
    _post(client, session.id, corrupt(jpegs))
    session.delete()
    text = client.metrics()
    for name in ('ttball_push_seconds_count{stage="decode"}', 'stage="network"',
                 'stage="postprocess"', 'stage="total"', 'ttball_stage_seconds_count{stage="queue"}',
                 "ttball_push_frames_bucket", 'ttball_heatmaps_total{where="device"}',
                 "ttball_batch_size_bucket", "ttball_windows_total", "ttball_frames_total",
                 "ttball_ready 1.0", 'ttball_errors_total{kind="not_an_image"}',
                 "ttball_queue_depth", "ttball_sessions"):
        assert name in text, name
    assert "ttball_push_seconds" not in servers["host"].metrics()
    # the lane thread's CPU time in pushes: some, and no more than the pushes' wall time
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    for stage in ("total", "decode", "preprocess", "postprocess"):
        cpu = samples[("ttball_push_cpu_seconds_total", (("stage", stage),))]
        wall = samples[("ttball_push_seconds_sum", (("stage", stage),))]
        assert 0 < cpu <= wall + 0.01, stage
    assert (samples[("ttball_push_cpu_seconds_total", (("stage", "total"),))]
            >= samples[("ttball_push_cpu_seconds_total", (("stage", "decode"),))])


# -- a shared push with a bad frame, at the runner itself -------------------------------------------
def test_a_refused_frame_leaves_the_other_uploads_of_its_push_alone(small_model, small_config,
                                                                    jpegs) -> None:
    backend = create("eager-fp32", small_model, "cpu")
    settings = ServeSettings(warmup_batches=(1, 2, 4), device_pipeline=True)
    path = DevicePath(backend, small_config, settings, Metrics(), ThreadPoolExecutor(1))
    assert path.describe()["carry_windows"] is False  # on by default, but no overlap to carry to
    # --pipeline-resize auto on the CPU: the torch ops, not a Triton kernel that would fail
    assert path.describe()["resize"] == "eager" and path.describe()["compile_resize_error"] is None
    rows: dict[str, list] = {"a": [], "b": [], "alone": []}

    def upload(name, key, blobs, first):
        return Upload(key, tuple(blobs), tuple((first + k, (first + k) / 30) for k in range(len(blobs))),
                      rows[name].extend)

    from ttball.stream import StreamOptions

    keys = {name: path.open(name, StreamOptions(step=1), 30.0).stream_id for name in rows}
    results = path.run([upload("a", keys["a"], jpegs[:3], 0),
                        upload("b", keys["b"], [jpegs[0], corrupt(jpegs)], 0),
                        upload("a", keys["a"], jpegs[3:5], 3)])
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], FrameRefused) and results[1].status == 400
    assert results[1].frame == 1 and results[1].code == "not_an_image"
    # the size is checked from decoded pixels too (a header can't be trusted)
    results = path.run([upload("a", keys["a"], [other_size(jpegs)], 5),
                        upload("b", keys["b"], jpegs[:2], 0)])  # b never saw its frame 0
    assert results[1] is None and isinstance(results[0], FrameRefused)
    assert (results[0].status, results[0].code, results[0].frame) == (422, "frame_size", 5)
    path.run([upload("alone", keys["alone"], jpegs[:5], 0)])
    for name in ("a", "alone"):
        path.run([Upload(keys[name], (), (), rows[name].extend, finish=True)])
    assert [r.frame for r in rows["a"]] == list(range(5))
    for got, want in zip(rows["a"], rows["alone"]):
        assert got.visible == want.visible and abs(got.x - want.x) < 1e-3


def test_overlap_resolves_an_upload_once_its_rows_are_delivered(small_model, small_config,
                                                                jpegs) -> None:
    """--pipeline-overlap at the runner: an upload whose windows are still in flight gets a
    future, resolved by the next push (or a flush, or a finish) after its rows went out; a
    failure reading them back fails the waiting uploads too."""
    from ttball.stream import StreamOptions

    backend = create("eager-fp32", small_model, "cpu")
    settings = ServeSettings(warmup_batches=(1, 2, 4), device_pipeline=True, pipeline_overlap=True)
    path = DevicePath(backend, small_config, settings, Metrics(), ThreadPoolExecutor(1))
    rows: list = []
    key = path.open("s", StreamOptions(step=1), 30.0).stream_id

    def upload(first: int, count: int) -> Upload:
        return Upload(key, tuple(jpegs[first : first + count]),
                      tuple((k, k / 30) for k in range(first, first + count)), rows.extend)

    first = path.run([upload(0, 4)])[0]  # two windows launched, none read back
    assert isinstance(first, Future) and not first.done() and rows == []
    second = path.run([upload(4, 2)])[0]  # reads the first push back, leaves its own running
    assert first.done() and first.result() is None and not second.done()
    assert [r.frame for r in rows] == [0, 1]
    path.flush()
    assert second.done() and [r.frame for r in rows] == [0, 1, 2, 3]
    assert path.run([upload(6, 1)])[0] is not None  # in flight again
    assert path.run([Upload(key, (), (), rows.extend, finish=True)]) == [None]
    assert [r.frame for r in rows] == list(range(FRAMES))

    broken = path.open("t", StreamOptions(step=1), 30.0).stream_id
    waiting = path.run([Upload(broken, tuple(jpegs[:4]), tuple((k, k / 30) for k in range(4)),
                               rows.extend)])[0]
    path.pipeline._post = lambda flight, timer: 1 / 0  # type: ignore[method-assign]
    with pytest.raises(ZeroDivisionError):
        path.flush()
    failure = waiting.exception()
    assert isinstance(failure, ApiError) and (failure.status, failure.code) == (500, "backend_error")


def _heatmaps(metrics: Metrics) -> float:
    return sum(metrics.registry.get_sample_value("ttball_heatmaps_total", {"where": where}) or 0.0
               for where in ("device", "host"))


@pytest.mark.parametrize("flush_thread", [False, True])
def test_a_flush_on_its_own_thread_delivers_every_row_in_order(small_model, small_config, jpegs,
                                                               flush_thread) -> None:
    """--flush-thread at the runner: flushes on another thread, each started as a push returns
    and racing the next push, deliver every session's rows in frame order and resolve every
    upload, with the rows a flush on the lane's thread gives; the heatmaps read back by the
    flushes are counted (ttball_heatmaps: 3 a window, none of the warm-up's)."""
    from ttball.stream import StreamOptions

    backend = create("eager-fp32", small_model, "cpu")
    settings = ServeSettings(warmup_batches=(1, 2, 4), device_pipeline=True, pipeline_overlap=True,
                             pipeline_carry=False, pipeline_flush_thread=flush_thread)
    metrics = Metrics()
    path = DevicePath(backend, small_config, settings, metrics, ThreadPoolExecutor(1))
    path.warm([1, 2])
    assert _heatmaps(metrics) == 0
    rows: dict[str, list] = {"a": [], "b": []}
    keys = {name: path.open(name, StreamOptions(step=1), 30.0).stream_id for name in rows}

    def upload(name: str, first: int, count: int) -> Upload:
        return Upload(keys[name], tuple(jpegs[first : first + count]),
                      tuple((k, k / 30) for k in range(first, first + count)), rows[name].extend)

    flusher = ThreadPoolExecutor(1)
    results, flushes = [], []
    for round_ in range(3):  # frames 0-1, 2-3, 4-5 of both sessions
        results += path.run([upload("a", 2 * round_, 2), upload("b", 2 * round_, 2)])
        flushes.append(flusher.submit(path.flush) if flush_thread else None)
        if not flush_thread:
            path.flush()
    for flush in flushes:
        if flush is not None:
            flush.result(timeout=60)
    for name, got in rows.items():
        path.run([upload(name, 6, 1)])
        path.run([Upload(keys[name], (), (), got.extend, finish=True)])
    for result in results:
        assert result is None or (isinstance(result, Future) and result.done()
                                  and result.result() is None)
    for got in rows.values():
        assert [r.frame for r in got] == list(range(FRAMES))
    assert rows["a"] == rows["b"]  # the same frames: the same rows
    windows = 2 * (FRAMES - 2)  # step 1: five windows a session
    assert _heatmaps(metrics) == 3 * windows
    flushed = {stage: metrics.registry.get_sample_value("ttball_flush_seconds_total",
                                                         {"stage": stage})
               for stage in FLUSH_STAGES}  # the flushes' stages, each counted
    assert None not in flushed.values()
    if not flush_thread:  # (a racing flush may find everything read back by the next push)
        assert flushed["track"] > 0 and flushed["post_read"] > 0 and flushed["wait"] == 0


def test_depth_two_resolves_an_upload_two_pushes_later(small_model, small_config, jpegs) -> None:
    """--pipeline-depth 2: an upload's future resolves once the push two after its own has read
    its batches back (a push in between leaves it waiting), and a flush resolves the rest."""
    from ttball.stream import StreamOptions

    backend = create("eager-fp32", small_model, "cpu")
    settings = ServeSettings(warmup_batches=(1, 2, 4), device_pipeline=True, pipeline_overlap=True,
                             pipeline_depth=2)
    path = DevicePath(backend, small_config, settings, Metrics(), ThreadPoolExecutor(1))
    assert path.describe()["depth"] == 2
    assert path.describe()["stats_stream"] is False  # asked for nothing; on the CPU never
    rows: list = []
    key = path.open("s", StreamOptions(step=1), 30.0).stream_id

    def upload(first: int, count: int) -> Upload:
        return Upload(key, tuple(jpegs[first : first + count]),
                      tuple((k, k / 30) for k in range(first, first + count)), rows.extend)

    first = path.run([upload(0, 4)])[0]
    second = path.run([upload(4, 1)])[0]
    assert isinstance(first, Future) and isinstance(second, Future)
    assert not first.done() and not second.done() and rows == []
    third = path.run([upload(5, 1)])[0]
    assert first.done() and not second.done() and not third.done()
    assert [r.frame for r in rows] == [0, 1]
    path.flush()
    assert second.done() and third.done() and [r.frame for r in rows] == [0, 1, 2, 3]
    assert path.run([Upload(key, (), (), rows.extend, finish=True)]) == [None]
    assert [r.frame for r in rows] == list(range(6))  # the last two once the session ends


def test_carry_resolves_an_upload_once_its_carried_rows_are_delivered(small_model, small_config,
                                                                      jpegs) -> None:
    """--carry-windows at the runner: an upload whose session had a window carried to the next
    push waits for that push (another session's upload of the same push does not); closing a
    session resolves its waiting uploads at once (no push need come)."""
    from ttball.stream import StreamOptions

    backend = create("eager-fp32", small_model, "cpu")
    settings = ServeSettings(warmup_batches=(1, 2), device_pipeline=True, pipeline_overlap=True,
                             pipeline_carry=True)
    metrics = Metrics()
    path = DevicePath(backend, small_config, settings, metrics, ThreadPoolExecutor(1))
    assert path.describe()["carry_windows"] is True
    rows: dict[str, list] = {"a": [], "b": []}
    keys = {name: path.open(name, StreamOptions(step=1), 30.0).stream_id for name in rows}

    def upload(name: str, first: int, count: int) -> Upload:
        return Upload(keys[name], tuple(jpegs[first : first + count]),
                      tuple((k, k / 30) for k in range(first, first + count)), rows[name].extend)

    # b's window 2 and a's 2, 3 are three windows: one call of 2 (b's 2, a's 2), a's 3 carried
    b1, a1 = path.run([upload("b", 0, 3), upload("a", 0, 4)])
    assert path.pipeline.carried_sessions == {keys["a"]}
    assert isinstance(a1, Future) and isinstance(b1, Future)
    assert metrics.windows_carried is not None and metrics.windows_carried._value.get() == 1
    path.run([upload("b", 3, 1)])  # reads the first call back, launches a's 3 and b's 3
    assert b1.done() and not a1.done()
    assert [r.frame for r in rows["b"]] == [0] and [r.frame for r in rows["a"]] == [0]
    path.flush()
    assert a1.done() and [r.frame for r in rows["a"]] == [0, 1]
    # a carried window of a session then closed: its upload resolves on the close
    a2 = path.run([upload("b", 4, 1), upload("a", 4, 2)])[1]  # b's 4, a's 4, 5: a's 5 carried
    assert path.pipeline.carried_sessions == {keys["a"]} and not a2.done()
    path._close(keys["a"])
    assert a2.done() and a2.result() is None and path.pipeline.in_flight == 2
    path.flush()
    assert path.pipeline.in_flight == 0 and [r.frame for r in rows["b"]] == [0, 1, 2]

def test_pipeline_depth_needs_overlap() -> None:
    with pytest.raises(UserError, match="--pipeline-depth needs --pipeline-overlap"):
        ServeSettings(device_pipeline=True, pipeline_depth=2).validate()
    with pytest.raises(UserError, match="between 1 and 4"):
        ServeSettings(device_pipeline=True, pipeline_overlap=True, pipeline_depth=5).validate()
    with pytest.raises(UserError, match="--stats-stream needs --pipeline-overlap"):
        ServeSettings(device_pipeline=True, pipeline_stats_stream=True).validate()
    with pytest.raises(UserError, match="--flush-thread needs --pipeline-overlap"):
        ServeSettings(device_pipeline=True, pipeline_flush_thread=True).validate()
    with pytest.raises(UserError, match="--flush-thread needs --no-carry-windows"):
        ServeSettings(device_pipeline=True, pipeline_overlap=True,
                      pipeline_flush_thread=True).validate()
    with pytest.raises(UserError, match="--flush-after-push needs --pipeline-overlap"):
        ServeSettings(device_pipeline=True, pipeline_flush_after_push=True).validate()
    with pytest.raises(UserError, match="exclusive"):
        ServeSettings(device_pipeline=True, pipeline_overlap=True, pipeline_carry=False,
                      pipeline_flush_thread=True, pipeline_flush_after_push=True).validate()


# -- batching and back-pressure with a gated backend -------------------------------------------------
@pytest.fixture()
def gated(small_weights):
    """gated(backend, **settings) → (Client, worker) of a device-pipeline worker."""
    opened = []

    def go(backend, wait=True, **overrides):
        settings = ServeSettings(**{"weights": str(small_weights), "device": "cpu",
                                    "device_pipeline": True,
                                    "backend_factory": lambda model, device: backend,
                                    **overrides})
        app = create_app(settings)
        cm = serve_in_thread(app)
        client = Client(cm.__enter__())
        opened.append((cm, client))
        if wait:
            client.wait_ready(timeout=60, poll=0.05)
        return client, app.state.worker

    yield go
    for cm, client in reversed(opened):
        client.close()
        cm.__exit__(None, None, None)


def _until(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_windows_of_sessions_share_batches_and_overload_gets_429(gated, jpegs) -> None:
    backend = GatedBackend()
    client, worker = gated(backend, warmup_batches=(1, 2), max_batch=2, max_queue=2,
                           max_delay_ms=20)
    a, b, c, d = (client.open_session(step=3) for _ in range(4))
    for s in (a, b, c):
        s.send(jpegs[0])
        s.send(jpegs[1])
    warm_calls = len(backend.sizes)
    backend.run_gate = gate = threading.Event()
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(a.send, jpegs[2])  # its window runs and blocks on the gate
        _until(lambda: len(backend.sizes) > warm_calls, "a's window never ran")
        queued = [pool.submit(s.send, jpegs[2]) for s in (b, c)]
        _until(lambda: worker.batcher.depth * 3 == 2, "b's and c's frames never queued")
        # capacity: 2 windows = 6 frames at step 3; 2 are queued, 5 more are too many
        reply = _post(client, d.id, pack_records(jpegs[:5]), "application/x-ttball-frames")
        assert reply.status_code == 429, reply.text
        assert reply.json()["error"]["code"] == "overloaded"
        assert int(reply.headers["Retry-After"]) >= 1
        gate.set()
        assert [r["frame"] for r in first.result(30)] == [0, 1, 2]
        assert [[r["frame"] for r in q.result(30)] for q in queued] == [[0, 1, 2], [0, 1, 2]]
    assert backend.sizes[warm_calls:] == [1, 2]  # b's and c's windows in one network call
    assert [r["frame"] for r in d.send_many(jpegs[:4])] == [0, 1, 2]  # d goes on normally
    # 7 frames at step 3 are more than an empty queue of 2 windows holds: 413, not a 429 that
    # no retry would get past
    reply = _post(client, d.id, pack_records([jpegs[0]] * 7), "application/x-ttball-frames")
    assert reply.status_code == 413, reply.text
    assert reply.json()["error"]["code"] == "too_many_frames"


def test_ready_only_after_warmup_of_backend_and_pipeline(gated, jpegs) -> None:
    backend = GatedBackend()
    backend.warm_gate = gate = threading.Event()
    client, _ = gated(backend, wait=False, warmup_batches=(1, 2))
    _until(lambda: client.readiness()["phase"] == "warmup", "never reached warm-up", 30)
    refused = client.http.post("/v1/sessions", json={})
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "not_ready"
    gate.set()
    client.wait_ready(timeout=30, poll=0.02)
    # the pipeline's warm-up ran a push of every size through the backend
    assert backend.sizes[-2:] == [1, 2]
    assert 'ttball_windows_total 0.0' in client.metrics()  # warm-up is not counted as work


def test_one_lane_with_a_flush_thread_freezes_its_graphs(gated, jpegs) -> None:
    """--flush-thread with one lane: the lane and its flush thread work at once, so the graphs
    are frozen once warm, as with several lanes (a capture while another thread works fails);
    its rows come, its flush thread does the flushing."""
    client, _ = gated(GatedBackend(), warmup_batches=(1, 2), pipeline_overlap=True,
                      pipeline_carry=False, pipeline_flush_thread=True)
    ready = client.readiness()["device_pipeline"]
    assert ready["flush_thread"] is True and ready["graphs_frozen"] is True
    session = client.open_session(step=3)
    rows = [row for data in jpegs[:4] for row in session.send(data)]
    rows += session.finish()
    assert [r["frame"] for r in rows] == [0, 1, 2, 3]
    assert "ttball-flush-0" in {t.name.rsplit("_", 1)[0] for t in threading.enumerate()}


def test_the_session_of_a_failed_batch_fails_and_others_go_on(gated, jpegs) -> None:
    class Broken(GatedBackend):
        broken = False

        def run(self, batch):
            if self.broken:
                raise RuntimeError("device lost")
            return super().run(batch)

    backend = Broken()
    client, _ = gated(backend, warmup_batches=(1,))
    session = client.open_session()
    session.send(jpegs[0])
    session.send(jpegs[1])
    backend.broken = True
    with pytest.raises(ServeError) as err:
        session.send(jpegs[2])
    assert err.value.status == 500 and err.value.code == "backend_error"
    with pytest.raises(ServeError) as again:
        session.send(jpegs[3])
    assert again.value.status == 409 and again.value.code == "session_failed"
    backend.broken = False
    other = client.open_session()
    assert [other.send(j) for j in jpegs[:3]][-1][0]["frame"] == 0


def test_a_decode_process_that_dies_is_replaced(gated, jpegs, monkeypatch) -> None:
    """--decode-processes 1: a child found dead before a push is started again and the push goes
    on; one that dies during a push fails that push as a backend error does (500; its session
    is failed) and the next push starts another."""
    client, worker = gated(GatedBackend(), warmup_batches=(1,), pipeline_decode_processes=1)
    decoder = worker.device.paths[0].pipeline.decoder
    session = client.open_session()
    assert session.send(jpegs[0]) == []
    decoder._children[0].proc.kill()
    decoder._children[0].proc.join()
    session.send(jpegs[1])  # decoded by a new child
    assert decoder.restarts == 1
    dying = decoder._children[0].proc
    dying.kill()
    dying.join()
    monkeypatch.setattr(dying, "is_alive", lambda: True)  # as if it died after the check
    with pytest.raises(ServeError) as err:
        session.send(jpegs[2])
    assert err.value.status == 500 and err.value.code == "backend_error"
    assert "the decode process exited" in err.value.message
    monkeypatch.undo()
    other = client.open_session()
    assert [other.send(j) for j in jpegs[:3]][-1][0]["frame"] == 0
    assert decoder.restarts == 2


# -- the command line and SIGTERM ----------------------------------------------------------------------
def test_cli_flag_sets_the_mode() -> None:
    import argparse

    from ttball.cli.serve import add_arguments, settings_from

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert settings_from(parser.parse_args(["--device-pipeline"])).device_pipeline is True
    assert settings_from(parser.parse_args([])).device_pipeline is False
    both = settings_from(parser.parse_args(["--device-pipeline", "--pipeline-overlap"]))
    assert both.device_pipeline and both.pipeline_overlap
    with pytest.raises(UserError, match="--pipeline-overlap needs --device-pipeline"):
        settings_from(parser.parse_args(["--pipeline-overlap"]))
    fused = settings_from(parser.parse_args(["--device-pipeline", "--pipeline-compile-resize"]))
    assert fused.pipeline_resize == "compile" and both.pipeline_resize == "auto"
    kernel = settings_from(parser.parse_args(["--device-pipeline", "--pipeline-resize", "triton"]))
    assert kernel.pipeline_resize == "triton"
    with pytest.raises(UserError, match="--pipeline-resize needs --device-pipeline"):
        settings_from(parser.parse_args(["--pipeline-compile-resize"]))
    with pytest.raises(UserError, match="--pipeline-resize needs --device-pipeline"):
        settings_from(parser.parse_args(["--pipeline-resize", "eager"]))
    with pytest.raises(UserError,
                       match="--pipeline-resize must be one of auto, eager, compile, triton"):
        dataclasses.replace(both, pipeline_resize="fast").validate()
    # auto: the Triton kernel on CUDA (the eight-replica A/B, forty-sixth session), torch ops
    # elsewhere; a mode asked for is kept
    from ttball.serve.settings import resize_mode

    assert resize_mode("auto", "cuda") == "triton" and resize_mode("auto", "cpu") == "eager"
    assert resize_mode("compile", "cuda") == "compile" and resize_mode("eager", "cuda") == "eager"
    assert both.pipeline_depth == 1 and not both.pipeline_stats_stream
    deep = settings_from(parser.parse_args(["--device-pipeline", "--pipeline-overlap",
                                            "--pipeline-depth", "2", "--stats-stream"]))
    assert deep.pipeline_depth == 2 and deep.pipeline_stats_stream
    assert both.pipeline_decoder == "nvjpeg"
    from ttball.kernels.prepost import DECODERS
    from ttball.kernels.prepost_image import RESIZE_MODES as MODES
    from ttball.serve.settings import JPEG_DECODERS, RESIZE_MODES

    assert JPEG_DECODERS == DECODERS and RESIZE_MODES == MODES
    chosen = settings_from(parser.parse_args(["--device-pipeline", "--jpeg-decoder", "nvimgcodec"]))
    assert chosen.pipeline_decoder == "nvimgcodec"
    with pytest.raises(UserError, match="--jpeg-decoder needs --device-pipeline"):
        settings_from(parser.parse_args(["--jpeg-decoder", "cv2"]))
    assert both.pipeline_lanes == 1
    lanes = settings_from(parser.parse_args(["--device-pipeline", "--pipeline-lanes", "4"]))
    assert lanes.pipeline_lanes == 4
    assert lanes.pipeline_decode_processes == 0
    apart = settings_from(parser.parse_args(["--device-pipeline", "--decode-processes", "2"]))
    assert apart.pipeline_decode_processes == 2 and apart.pipeline_decode_ahead is False
    ahead = settings_from(parser.parse_args(["--device-pipeline", "--decode-processes", "1",
                                             "--decode-ahead"]))
    assert ahead.pipeline_decode_ahead is True and ahead.pipeline_decode_early is False
    early = settings_from(parser.parse_args(["--device-pipeline", "--decode-processes", "1",
                                             "--decode-ahead", "--decode-early"]))
    assert early.pipeline_decode_early is True
    with pytest.raises(UserError, match="--decode-early needs --decode-ahead"):
        settings_from(parser.parse_args(["--device-pipeline", "--decode-processes", "1",
                                         "--decode-early"]))
    with pytest.raises(UserError, match="--decode-ahead needs --decode-processes"):
        settings_from(parser.parse_args(["--device-pipeline", "--decode-ahead"]))
    assert both.pipeline_decode_on_arrival is False
    arrival = settings_from(parser.parse_args(["--device-pipeline", "--decode-on-arrival"]))
    assert arrival.pipeline_decode_on_arrival is True
    with pytest.raises(UserError, match="--decode-on-arrival needs --device-pipeline"):
        settings_from(parser.parse_args(["--decode-on-arrival"]))
    with pytest.raises(UserError, match="--decode-on-arrival and --decode-processes are "
                                        "exclusive"):
        settings_from(parser.parse_args(["--device-pipeline", "--decode-on-arrival",
                                         "--decode-processes", "1"]))
    assert both.pipeline_carry is True  # the default (it takes effect with the overlap only)
    no_carry = settings_from(parser.parse_args(["--device-pipeline", "--pipeline-overlap",
                                                "--no-carry-windows"]))
    assert no_carry.pipeline_carry is False
    with pytest.raises(UserError, match="--decode-processes needs --device-pipeline"):
        settings_from(parser.parse_args(["--decode-processes", "1"]))
    with pytest.raises(UserError, match="--decode-processes must be in 0..16, got 17"):
        settings_from(parser.parse_args(["--device-pipeline", "--decode-processes", "17"]))
    with pytest.raises(UserError, match="--pipeline-lanes needs --device-pipeline"):
        settings_from(parser.parse_args(["--pipeline-lanes", "2"]))
    with pytest.raises(UserError, match="--pipeline-lanes must be >= 1, got 0"):
        settings_from(parser.parse_args(["--device-pipeline", "--pipeline-lanes", "0"]))


SERVER = textwrap.dedent("""
    import sys, time
    import torch
    from ttball.backends import BackendBase, register

    class Slow(BackendBase):
        slow = False

        def run(self, batch):
            if self.slow:
                time.sleep(1.5)
            return torch.zeros(batch.shape[0], 3, *batch.shape[2:])

    backend = []
    def build(model, device):
        backend.append(Slow(device))
        return backend[-1]

    register("slow-fake-device", description="test: 1.5 s per batch once ready")(build)
    import ttball.serve.worker as w
    go_live = w.Worker._go_live
    def live(self):
        go_live(self)
        backend[-1].slow = True  # after the pipeline's warm-up push
    w.Worker._go_live = live
    from ttball.cli import COMMANDS, main
    COMMANDS["serve"] = ("ttball.cli.serve", "the worker")
    sys.exit(main(["serve", "--backend", "slow-fake-device", "--device", "cpu", "--weights",
                   sys.argv[1], "--port", sys.argv[2], "--warmup-batches", "1",
                   "--device-pipeline", "--log-level", "warning"]))
""")


def test_sigterm_finishes_in_flight_request_and_exits_0(small_weights, tmp_path, jpegs) -> None:
    assert_sigterm_finishes_in_flight(SERVER, small_weights, tmp_path, jpegs,
                                      'ttball_stage_seconds_count{stage="queue"} 3.0')


def _cuda_settings(small_weights) -> dict:
    """The GPU tests' worker: a CUDA-graph backend, the device pipeline."""
    return {"weights": str(small_weights), "device": "cuda", "backend": "cudagraph-fp32",
            "warmup_batches": (1, 2, 4), "max_frame_bytes": 300_000,
            "max_body_bytes": 1_000_000, "device_pipeline": True}


def _six_streams(client, jpegs) -> list[list[dict]]:
    """Six WebSocket sessions at once (steps 3, 1, 3, 1, 3, 1), the clip each: their rows."""
    def one(step: int) -> list[dict]:
        with client.open_session(step=step, fps=30).stream() as ws:
            for data in jpegs:
                ws.send(data)
            return ws.finish()

    with ThreadPoolExecutor(6) as pool:
        return list(pool.map(one, [3, 1, 3, 1, 3, 1]))


def _assert_rows_close(got: list[list[dict]], want: list[list[dict]]) -> None:
    """The same frames and visibility, positions within 0.5 px (batches composed differently)."""
    for g, w in zip(got, want):
        assert [r["frame"] for r in g] == [r["frame"] for r in w]
        assert [r["visible"] for r in g] == [r["visible"] for r in w]
        assert max(abs(a["x"] - b["x"]) + abs(a["y"] - b["y"]) for a, b in zip(g, w)) < 0.5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_lanes_on_cuda_give_one_lanes_rows_with_frozen_graphs(small_weights, jpegs) -> None:
    """On the GPU: two lanes of a CUDA-graph backend, each on a CUDA stream of its own, pushed
    at once from their threads once their graphs are frozen. Every session's rows match those
    of a one-lane worker (batches are composed differently, so positions within 0.5 px), and
    no call ran without a graph."""
    base = _cuda_settings(small_weights)

    # one server after the other: two servers warming in one process would capture CUDA
    # graphs from two threads at once, which a worker never does (its lanes warm in turn)
    with serve_in_thread(create_app(ServeSettings(**base))) as one_url, Client(one_url) as one:
        one.wait_ready(timeout=300, poll=0.2)
        want = _six_streams(one, jpegs)
    with serve_in_thread(create_app(ServeSettings(**base, pipeline_lanes=2))) as two_url, \
            Client(two_url) as two:
        two.wait_ready(timeout=300, poll=0.2)
        got = _six_streams(two, jpegs)
        ready = two.readiness()["device_pipeline"]
    assert ready["lanes"] == 2 and ready["graphs_frozen"] is True
    assert ready["uncaptured_calls"] == 0, ready
    _assert_rows_close(got, want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("placement", ["thread", "after-push"])
def test_flush_threads_on_cuda_give_the_rows_of_a_plain_worker(small_weights, jpegs,
                                                               placement) -> None:
    """On the GPU: two lanes with overlap whose flushes run on threads of their own
    (--flush-thread: each waits for its lane's batches on the GPU outside the pipeline's lock
    while the lane pushes on), or on the lane's thread right after each push
    (--flush-after-push), give every session the rows of a one-lane worker without
    overlap (positions within 0.5 px: batches are composed differently)."""
    base = _cuda_settings(small_weights)

    with serve_in_thread(create_app(ServeSettings(**base))) as one_url, Client(one_url) as one:
        one.wait_ready(timeout=300, poll=0.2)
        want = _six_streams(one, jpegs)
    flushing = ServeSettings(**base, pipeline_lanes=2, pipeline_overlap=True, pipeline_carry=False,
                             max_delay_ms=0, pipeline_flush_thread=placement == "thread",
                             pipeline_flush_after_push=placement == "after-push")
    with serve_in_thread(create_app(flushing)) as url, Client(url) as client:
        client.wait_ready(timeout=300, poll=0.2)
        got = _six_streams(client, jpegs)
        ready = client.readiness()["device_pipeline"]
        metrics = client.metrics()
    assert ready["flush_thread"] is (placement == "thread"), ready
    assert ready["flush_after_push"] is (placement == "after-push"), ready
    assert ready["uncaptured_calls"] == 0, ready
    assert 'ttball_stage_seconds_count{stage="idle"}' in metrics
    # the calls the flushes read back: their GPU time from their timing events. A flush may
    # read back none (with --flush-thread, a push that follows at once reads back the calls
    # the flush waited for: it failed so in one of two runs on an H100), so their GPU time is
    # there exactly when their read-backs are; the pushes' and the flushes' together never 0
    flushed = _sample(metrics, 'ttball_flush_seconds_total{stage="post_read"}')
    network = _sample(metrics, 'ttball_flush_seconds_total{stage="gpu_network"}')
    assert (network > 0) == (flushed > 0), (network, flushed)
    assert network + _sample(metrics, 'ttball_push_seconds_sum{stage="gpu_network"}') > 0
    _assert_rows_close(got, want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_decode_on_arrival_on_cuda_gives_the_rows_of_a_plain_worker(small_weights,
                                                                    jpegs) -> None:
    """On the GPU: two lanes with overlap whose uploads are decoded on arrival
    (--decode-on-arrival: nvjpeg-own on each lane's arrival thread and stream, waited for by
    the push's stream) give every session the rows of a one-lane worker that decodes in its
    pushes (positions within 0.5 px: batches are composed differently, and the decoders
    differ); every frame was decoded on arrival."""
    base = _cuda_settings(small_weights)

    with serve_in_thread(create_app(ServeSettings(**base))) as one_url, Client(one_url) as one:
        one.wait_ready(timeout=300, poll=0.2)
        want = _six_streams(one, jpegs)
    arriving = ServeSettings(**base, pipeline_lanes=2, pipeline_overlap=True,
                             pipeline_decode_on_arrival=True)
    with serve_in_thread(create_app(arriving)) as url, Client(url) as client:
        client.wait_ready(timeout=300, poll=0.2)
        got = _six_streams(client, jpegs)
        ready = client.readiness()["device_pipeline"]
        metrics = client.metrics()
    assert ready["decode_on_arrival"] is True and ready["uncaptured_calls"] == 0, ready
    print("arrival decoder:", ready["arrival_decoder"], ready["arrival_decoder_note"])
    assert _sample(metrics, 'ttball_arrival_frames_total{where="arrival"}') == 6 * len(jpegs)
    _assert_rows_close(got, want)


def test_live_settings_change_the_flush_the_wait_and_the_switch_interval_while_serving(
        small_weights, jpegs, reference, laned) -> None:
    """--live-settings: PUT /v1/admin/settings changes the flush's placement, the decode on
    arrival, the wait for company and the switch interval of a running worker, all or none;
    /readyz shows them; the rows stay ``track``'s. A bad change is a 422 that changes nothing;
    off, the route is 404; the decode on arrival is switched on only in a worker started
    with it."""
    import sys

    switch = sys.getswitchinterval()
    settings = ServeSettings(weights=str(small_weights), device="cpu", warmup_batches=(1, 2),
                             torch_threads=1, max_frame_bytes=300_000, max_body_bytes=1_000_000,
                             device_pipeline=True, pipeline_overlap=True, live_settings=True,
                             pipeline_decode_on_arrival=True)
    try:
        with serve_in_thread(create_app(settings)) as url, Client(url) as client:
            client.wait_ready(timeout=90, poll=0.1)
            assert client.readiness()["live_settings"] == {
                "flush_after_push": False, "decode_on_arrival": True, "max_delay_ms": 2.0,
                "switch_interval_ms": round(switch * 1e3, 6)}
            change = {"flush_after_push": True, "decode_on_arrival": False, "max_delay_ms": 0.5,
                      "switch_interval_ms": 1}
            reply = client.http.put("/v1/admin/settings", json=change)
            assert reply.status_code == 200 and reply.json() == {**change, "switch_interval_ms": 1.0}
            assert sys.getswitchinterval() == pytest.approx(1e-3)
            ready = client.readiness()
            assert ready["live_settings"]["flush_after_push"] is True
            assert ready["device_pipeline"]["flush_after_push"] is True
            assert ready["device_pipeline"]["decode_on_arrival"] is False
            for bad, words in (({"max_delay_ms": -1}, "0..1000"), ({"bogus": 1}, "not a live"),
                               ({"flush_after_push": 1}, "true or false"),
                               ({"decode_on_arrival": "yes"}, "true or false"),
                               ({"max_delay_ms": 3, "switch_interval_ms": 0}, "0.01..100"),
                               ([1], "JSON object")):
                refused = client.http.put("/v1/admin/settings", json=bad)
                assert refused.status_code == 422, refused.text
                assert words in refused.json()["error"]["message"]
            assert client.readiness()["live_settings"]["max_delay_ms"] == 0.5  # none applied
            broken = client.http.put("/v1/admin/settings", content=b"{not json")
            assert broken.status_code == 400
            session = client.open_session(step=3, fps=30)  # served with the flush after push
            rows = [r for data in jpegs for r in session.send(data)] + session.finish()
            assert_rows_equal(rows, reference[3])
            metrics = client.metrics()
            assert _sample(metrics, 'ttball_stage_seconds_count{stage="idle"}') > 0
            where = {w: _sample(metrics, f'ttball_arrival_frames_total{{where="{w}"}}')
                     for w in ("arrival", "push")}
            assert where == {"arrival": 0, "push": len(jpegs)}  # switched off: all by pushes
            on = client.http.put("/v1/admin/settings", json={"decode_on_arrival": True})
            assert on.status_code == 200 and on.json()["decode_on_arrival"] is True
            session = client.open_session(step=3, fps=30)
            rows = [r for data in jpegs for r in session.send(data)] + session.finish()
            assert_rows_equal(rows, reference[3])
            assert _sample(client.metrics(),
                           'ttball_arrival_frames_total{where="arrival"}') == len(jpegs)
    finally:
        sys.setswitchinterval(switch)
    off = laned["lanes"].http.put("/v1/admin/settings", json={"max_delay_ms": 1})
    assert off.status_code == 404 and "--live-settings" in off.json()["error"]["message"]
    overlap_off = ServeSettings(weights=str(small_weights), device="cpu", warmup_batches=(1,),
                                torch_threads=1, live_settings=True)
    with serve_in_thread(create_app(overlap_off)) as url, Client(url) as client:
        client.wait_ready(timeout=90, poll=0.1)
        refused = client.http.put("/v1/admin/settings", json={"flush_after_push": True})
        assert refused.status_code == 422 and "--pipeline-overlap" in refused.text
        refused = client.http.put("/v1/admin/settings",
                                  json={"max_delay_ms": 1, "decode_on_arrival": True})
        assert refused.status_code == 422 and "--decode-on-arrival" in refused.text
        assert client.readiness()["live_settings"]["max_delay_ms"] == 2.0  # none applied
        assert client.http.put("/v1/admin/settings",
                               json={"decode_on_arrival": False}).status_code == 200

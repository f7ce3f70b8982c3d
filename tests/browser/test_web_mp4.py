"""The web page reads every frame of an MP4/MOV file with WebCodecs (``web/src/mp4frames.js``):
the frames, their times and their order are those PyAV and OpenCV read from the file, with
B-frames, with an edit list that leaves frames out, with the moov first or last, with the page's
main thread jammed or the CPU loaded (a ``<video>`` skips the frames it could not present in
time there); the run's fps is the track's. A truncated or corrupt MP4 ends with an error naming
the file and a stop ends the run at once; a file that is no MP4, or whose codec this browser's
VideoDecoder refuses, still plays in a ``<video>``, and the log says which reader ran. A display
matrix that turns by 90, 180 or 270° turns the frames as OpenCV turns them (``ttball track``);
another one is left out, and the log says so.

Clips are written here by PyAV (libx264, libvpx-vp9) and OpenCV. Runs in the harnesses of
``test_web.py`` (a page's rows, with its network inputs) and ``test_web_audit.py`` (fake
workers, the page's log); same requirements (node, chromium, ``make web``).
"""

from __future__ import annotations

import contextlib
import math
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from test_web import _built_site, _chromium, _drive, _static_server, _unb64
from test_web_audit import _case, _webm, drive

pytestmark = pytest.mark.browser

SIZE = (64, 48)  # (width, height)
FPS = 25  # not the 30 the <video> path assumes
FRAMES = 30
LONG_FRAMES = 60
EDIT_SKIP = 2  # frames the edited clip's edit list leaves out
LOADED_FRAMES = 120
W = "mode=worker&worker=/"
WEBCODECS = "every frame read with WebCodecs"
VIDEO = "played in a <video>"
# A page task that keeps the main thread busy 40 ms of every 50: requestVideoFrameCallback
# fires only when the page renders, so a <video> running on meanwhile skips frames.
JAM = "setInterval(() => { const t = performance.now(); while (performance.now() - t < 40); }, 50);"
MODEL_SIZE = (8, 16)  # (height, width) of the stand-in model's input
# The clips whose rows are compared with PyAV's frames, and how many frames each shows.
ROW_CLIPS = {"bframes": FRAMES, "faststart": FRAMES, "vp9": FRAMES, "edited": FRAMES - EDIT_SKIP}
# Display matrices (a, b, c, d) written into a clip's tkhd (or its mvhd), and the clockwise turn
# OpenCV gives each (its CAP_PROP_ORIENTATION_META; ffmpeg's av_display_rotation_get is minus it).
# [0 1; -1 0] is what PyAV's set_display_rotation(-90) writes, and a phone's portrait video.
TURNS = {"turn90": ((0, 1, -1, 0), 90), "turn180": ((-1, 0, 0, -1), 180),
         "turn270": ((0, -1, 1, 0), 270), "movie90": ((0, 1, -1, 0), 90)}
SKEW = math.cos(math.pi / 4)
SKEWED = (SKEW, SKEW, -SKEW, SKEW)  # a turn by 45°: neither the page nor OpenCV applies it
# The largest difference (0-255) between the page's network input and OpenCV's frame at the same
# size, over all frames, let through. Measured (Chromium 156, OpenCV 5.1): 1 with the right turn
# or none; 237 or more with frames as stored or turned the wrong way (the ball elsewhere).
TURN_TOLERANCE = 8
# Keeps each in-browser window's frames and network input (base64 float32, as browser_check.js
# gives them) and hands them to the driver of test_web_audit.py as its probe.
NETWORK_PROBE = """
window.ttballDebug = { windows: [] };
const b64 = (f) => btoa(String.fromCharCode(...new Uint8Array(f.buffer, f.byteOffset, f.byteLength)));
Object.defineProperty(window, 'ttballProbe', {
  get: () => window.ttballDebug.windows.map((w) => ({ frames: w.frames, input: b64(w.input) })),
});
"""


def _frame(i: int, size: tuple[int, int] = SIZE) -> np.ndarray:
    """RGB frame ``i``: its own grey level (12 apart) and a ball moving right."""
    w, h = size
    img = np.full((h, w, 3), 16 + 12 * (i % 19), np.uint8)
    cv2.circle(img, (4 + (3 * i) % (w - 8), h // 2), 4, (255, 255, 255), -1)
    return img


def _mp4(path: Path, frames: int, codec: str = "libx264", options: dict[str, str] | None = None,
         faststart: bool = False, size: tuple[int, int] = SIZE, fps: int = FPS) -> Path:
    """An MP4 written by PyAV; libx264 with its default B-frames and edit list."""
    import av

    with av.open(str(path), "w", options={"movflags": "+faststart"} if faststart else {}) as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = options or {}
        for i in range(frames):
            out.mux(stream.encode(av.VideoFrame.from_ndarray(_frame(i, size), format="rgb24")))
        out.mux(stream.encode())
    return path


def _pyav_frames(path: Path) -> list[tuple[float, np.ndarray]]:
    """(time in seconds, RGB) of each frame PyAV decodes, in presentation order."""
    import av

    with av.open(str(path)) as container:
        return [(float(f.time), f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]


def _slice_model(path: Path) -> Path:
    """A stand-in network: its output is its input's first 3 channels, [1, 3, 8, 16]."""
    import onnx
    from onnx import TensorProto, helper

    h, w = MODEL_SIZE
    x = helper.make_tensor_value_info("frames", TensorProto.FLOAT, [1, 9, h, w])
    y = helper.make_tensor_value_info("heatmaps", TensorProto.FLOAT, [1, 3, h, w])
    consts = [helper.make_tensor(n, TensorProto.INT64, [1], [v])
              for n, v in (("starts", 0), ("ends", 3), ("axes", 1))]
    node = helper.make_node("Slice", ["frames", "starts", "ends", "axes"], ["heatmaps"])
    graph = helper.make_graph([node], "slice", [x], [y], initializer=consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _cut(path: Path, to: Path, keep: float) -> str:
    """The first ``keep`` of ``path``'s bytes, as a file cut short in a copy or a download."""
    data = path.read_bytes()
    to.write_bytes(data[: int(len(data) * keep)])
    return str(to)


def _garbled(path: Path, to: Path, skip: int) -> str:
    """``path`` with its mdat's bytes past the first ``skip`` replaced by random ones."""
    data = bytearray(path.read_bytes())
    start = data.index(b"mdat") + 4 + skip
    data[start:] = np.random.default_rng(0).integers(0, 256, len(data) - start, np.uint8).tobytes()
    to.write_bytes(bytes(data))
    return str(to)


def _edited(path: Path, to: Path, skip: int) -> Path:
    """``path`` whose edit list starts ``skip`` frames later: those are decoded, not shown."""
    import av

    with av.open(str(path)) as container:
        ticks = round(1 / (FPS * container.streams.video[0].time_base))  # a frame, in mdhd units
    data = bytearray(path.read_bytes())
    at = data.index(b"elst") + 4
    assert data[at] == 0 and int.from_bytes(data[at + 4:at + 8], "big") == 1  # v0, one edit
    start = int.from_bytes(data[at + 12:at + 16], "big") + skip * ticks
    data[at + 12:at + 16] = start.to_bytes(4, "big")
    to.write_bytes(bytes(data))
    return to


def _too_wide(path: Path, to: Path, width: int) -> str:
    """``path`` whose avc1 sample entry says ``width`` pixels wide (the frames are not)."""
    data = bytearray(path.read_bytes())
    at = data.index(b"avc1", data.index(b"stsd")) + 4 + 24  # type; reserved, index, pre-defined
    data[at:at + 2] = width.to_bytes(2, "big")
    to.write_bytes(bytes(data))
    return str(to)


def _with_matrix(path: Path, to: Path, abcd: tuple[float, float, float, float],
                box: bytes = b"tkhd") -> Path:
    """``path`` whose track's (``tkhd``) or movie's (``mvhd``) display matrix is [a b 0; c d 0;
    0 0 1], a, b, c, d given as numbers (stored in 16.16 fixed point)."""
    data = bytearray(path.read_bytes())
    at = data.index(box) + 4
    assert data[at] == 0  # version 0: 32-bit times
    # version, flags, times, ...: tkhd's 4 + 20 + 8 (reserved) + 8 (layer, group, volume,
    # reserved); mvhd's 4 + 16 + 4 (rate) + 2 (volume) + 10 (reserved).
    at += 40 if box == b"tkhd" else 36
    a, b, c, d = (round(v * 65536) for v in abcd)
    data[at:at + 36] = struct.pack(">9i", a, b, 0, c, d, 0, 0, 0, 1 << 30)
    to.write_bytes(bytes(data))
    return to


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("web-mp4")
    clips = {
        "bframes": _mp4(tmp / "bframes.mp4", FRAMES),  # moov last, B-frames, an edit list
        "faststart": _mp4(tmp / "faststart.mp4", FRAMES, options={"bf": "0"}, faststart=True),
        "vp9": _mp4(tmp / "vp9.mp4", FRAMES, codec="libvpx-vp9"),
        "long": _mp4(tmp / "long.mp4", LONG_FRAMES),
    }
    clips["edited"] = _edited(clips["bframes"], tmp / "edited.mp4", EDIT_SKIP)
    mp4v = tmp / "mp4v.mp4"  # MPEG-4 Part 2, as OpenCV writes by default
    writer = cv2.VideoWriter(str(mp4v), cv2.VideoWriter.fourcc(*"mp4v"), FPS, SIZE)
    for i in range(6):
        writer.write(_frame(i)[:, :, ::-1])
    writer.release()
    clips["mp4v"] = mp4v
    return clips


# -- frames, times and order, against PyAV ---------------------------------------------------
@pytest.fixture(scope="module")
def page_rows(clips: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each clip through the page in the browser (WASM) with the stand-in model: {name: run}."""
    tmp = tmp_path_factory.mktemp("web-mp4-rows")
    chromium, site = _chromium(), tmp / "site"
    shutil.copytree(_built_site(), site)
    _slice_model(site / "model.onnx")  # the page's default model, beside it
    names = list(ROW_CLIPS)
    runs = {}
    with _static_server(site) as url:
        for name in names:  # one clip a job: the driver sends its `frames` to every run
            job = {"chromium": chromium, "url": f"{url}/", "frames": [str(clips[name])],
                   "timeoutMs": 60000, "runs": [{"name": name, "mode": "browser", "ep": "wasm",
                                                 "debug": True}]}
            (tmp / name).mkdir()
            runs[name] = _drive(job, tmp / name)["runs"][0]
    return runs


def _network_frames(windows: list[dict[str, Any]]) -> dict[int, np.ndarray]:
    """Each frame as the page fed it to the network (its 16×8 resize): {frame: RGB (8, 16, 3),
    float levels 0–255}, from the debug windows' inputs."""
    h, w = MODEL_SIZE
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    frames = {}
    for window in windows:
        data = _unb64(window["input"], np.float32)
        for frame, rgb in zip(window["frames"], data.reshape(3, 3, h, w)):
            frames[frame] = (rgb.transpose(1, 2, 0) * std + mean) * 255
    return frames


def _frame_means(run: dict[str, Any]) -> dict[int, float]:
    """Each frame's mean level (0–255) in the page's network input."""
    return {i: float(rgb.mean()) for i, rgb in _network_frames(run["debug"]["windows"]).items()}


@pytest.mark.parametrize("name", list(ROW_CLIPS))
def test_every_frame_arrives_with_its_time(page_rows: dict[str, Any], clips: dict[str, Path],
                                            name: str) -> None:
    run = page_rows[name]
    reference = _pyav_frames(clips[name])
    count = ROW_CLIPS[name]
    assert len(reference) == count == len(_opencv_frames(clips[name]))
    rows = run["results"]
    assert [r["frame"] for r in rows] == list(range(count)), rows
    times = [r["time_s"] for r in rows]
    np.testing.assert_allclose(times, [t for t, _ in reference], rtol=0, atol=1e-9)
    # In presentation order: each frame is the one PyAV gives at that time (its grey level).
    means = _frame_means(run)
    assert sorted(means) == list(range(count))
    h, w = MODEL_SIZE
    for i, (_, rgb) in enumerate(reference):
        expected = float(cv2.resize(rgb, (w, h), interpolation=cv2.INTER_LINEAR).mean())
        assert abs(means[i] - expected) < 4, (i, means[i], expected)


# -- display matrices, against OpenCV -----------------------------------------------------------
def _opencv_frames(path: Path, turned: bool = True) -> list[np.ndarray]:
    """RGB frames as OpenCV reads them: turned by the display matrix (its default, which
    ``ttball track`` keeps) or as stored."""
    cap = cv2.VideoCapture(str(path))
    assert cap.get(cv2.CAP_PROP_ORIENTATION_AUTO) == 1  # its default, kept by ttball.frames
    cap.set(cv2.CAP_PROP_ORIENTATION_AUTO, 1 if turned else 0)
    frames = []
    while (read := cap.read())[0]:
        frames.append(read[1][:, :, ::-1])
    cap.release()
    return frames


@pytest.fixture(scope="module")
def turned(clips: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The B-frame clip with display matrices written in ({name}.mp4), each through the page in
    the browser (WASM, the stand-in model) in one Chromium: {"clips": {name: path}, "cases":
    {name: result, its probe the network inputs}}."""
    tmp = tmp_path_factory.mktemp("web-mp4-turned")
    media = tmp / "media"
    media.mkdir()
    turned = {name: _with_matrix(clips["bframes"], media / f"{name}.mp4", abcd,
                                 b"mvhd" if name.startswith("movie") else b"tkhd")
              for name, (abcd, _) in TURNS.items()}
    turned["skewed"] = _with_matrix(clips["bframes"], media / "skewed.mp4", SKEWED)
    model = str(_slice_model(tmp / "slice.onnx"))
    result = drive(tmp, [{"name": name, "model": model, "files": [str(path)], "init": NETWORK_PROBE,
                          "waitMs": 30000} for name, path in turned.items()])
    return {"clips": turned, **result}


def _largest_difference(seen: dict[int, np.ndarray], frames: list[np.ndarray]) -> float:
    """The largest difference (0–255) between the page's network inputs and ``frames`` at the
    network's size (cv2.resize, as ttball.frames.resize), over all frames."""
    h, w = MODEL_SIZE
    assert sorted(seen) == list(range(len(frames)))
    return max(float(np.abs(seen[i] - cv2.resize(rgb, (w, h), interpolation=cv2.INTER_LINEAR)).max())
               for i, rgb in enumerate(frames))


@pytest.mark.parametrize("name", list(TURNS))
def test_mp4_frames_are_turned_as_opencv_turns_them(turned: dict[str, Any], name: str) -> None:
    clip, case = turned["clips"][name], _case(turned, name)
    assert case["done"] and case["error"] is None and case["frames"] == FRAMES, case
    turn = TURNS[name][1]
    reference = _opencv_frames(clip)
    assert cv2.VideoCapture(str(clip)).get(cv2.CAP_PROP_ORIENTATION_META) == turn
    stored = _opencv_frames(clip, turned=False)
    height, width = reference[0].shape[:2]
    assert (width, height) == (SIZE[::-1] if turn % 180 else SIZE)
    seen = _network_frames(case["probe"])
    assert _largest_difference(seen, reference) < TURN_TOLERANCE
    # Frames as stored, or turned the other way, fail it (the ball is elsewhere).
    assert _largest_difference(seen, stored) > TURN_TOLERANCE
    assert _largest_difference(seen, [np.rot90(f, 2) for f in reference]) > TURN_TOLERANCE
    said = (f"{name}.mp4: {WEBCODECS} (avc1.64000a, turned {turn}° clockwise by its display "
            f"matrix, {width}×{height}, {FRAMES} frames, {FPS:.3f} fps)")
    assert [t for t in _lines(case) if WEBCODECS in t] == [said], case


def test_mp4_display_matrix_that_is_no_quarter_turn_is_left_out(turned: dict[str, Any]) -> None:
    clip, case = turned["clips"]["skewed"], _case(turned, "skewed")
    assert case["done"] and case["error"] is None and case["frames"] == FRAMES, case
    said = (f"skewed.mp4: {WEBCODECS} (avc1.64000a, display matrix [0.7071 0.7071 -0.7071 "
            f"0.7071] not applied: no turn by a multiple of 90°, 64×48, {FRAMES} frames, "
            f"{FPS:.3f} fps)")
    assert [t for t in _lines(case) if "matrix" in t] == [said], case
    # OpenCV leaves a 45° turn out too: the frames as stored.
    assert cv2.VideoCapture(str(clip)).get(cv2.CAP_PROP_ORIENTATION_META) == 45
    assert _largest_difference(_network_frames(case["probe"]), _opencv_frames(clip)) < TURN_TOLERANCE


# -- counts, logs and errors, through a fake worker -------------------------------------------
@pytest.fixture(scope="module")
def cases(clips: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("web-mp4-cases")
    media = tmp / "media"
    media.mkdir()
    faststart = _mp4(media / "fs-long.mp4", LONG_FRAMES, faststart=True)  # moov, then mdat
    truncated = _cut(faststart, media / "truncated.mp4", 0.6)
    return drive(tmp, [
        {"name": "mp4", "query": f"{W}w-mp4", "files": [str(clips["bframes"])], "waitMs": 20000},
        {"name": "jammed", "query": f"{W}w-jam", "files": [str(clips["long"])], "waitMs": 40000,
         "init": JAM},
        {"name": "truncated", "query": f"{W}w-cut", "files": [truncated], "waitMs": 20000},
        {"name": "corrupt", "query": f"{W}w-bad", "waitMs": 20000,
         "files": [_garbled(faststart, media / "corrupt.mp4", 800)]},
        {"name": "no_moov", "query": f"{W}w-moov", "waitMs": 10000,
         "files": [_cut(clips["bframes"], media / "no-moov.mp4", 0.5)]},
        {"name": "too_wide", "query": f"{W}w-wide", "waitMs": 10000,
         "files": [_too_wide(clips["bframes"], media / "wide.mp4", 40000)]},
        {"name": "webm", "query": f"{W}w-webm", "waitMs": 20000,
         "files": [_webm(media / "clip.webm", 8, SIZE, fps=FPS)]},
        {"name": "mp4v", "query": f"{W}w-mp4v", "files": [str(clips["mp4v"])], "waitMs": 20000},
        {"name": "stop", "query": f"{W}w-stop", "files": [str(clips["long"])], "waitMs": 5000,
         "stopAfterMs": 1500},
    ])


def _lines(case: dict[str, Any]) -> list[str]:
    return [line["text"] for line in case["log"]]


def test_mp4_is_read_frame_by_frame_at_its_own_fps(cases: dict[str, Any]) -> None:
    case = _case(cases, "mp4")
    assert case["done"] and case["error"] is None and case["frames"] == FRAMES, case
    said = f"bframes.mp4: {WEBCODECS} (avc1.64000a, 64×48, {FRAMES} frames, {FPS:.3f} fps)"
    assert [t for t in _lines(case) if WEBCODECS in t] == [said], case
    # The worker's session runs at the track's frame rate, not the 30 assumed for a <video>.
    assert cases["options"]["/w-mp4/s1"] == {"step": 3, "fps": FPS}, cases["options"]


def test_no_frame_is_lost_while_the_page_is_busy(cases: dict[str, Any]) -> None:
    case = _case(cases, "jammed")
    assert case["done"] and case["error"] is None, case
    assert case["frames"] == LONG_FRAMES, case  # a <video> kept about half of them here


def test_truncated_mp4_ends_with_an_error(cases: dict[str, Any]) -> None:
    case = _case(cases, "truncated")
    assert case["done"], f"the page hung on a truncated MP4: {case}"
    error = case["error"] or ""
    assert error.startswith("truncated.mp4: frame data past the end of the file"), case
    assert error.endswith("the file is truncated"), case
    assert 0 < case["frames"] < LONG_FRAMES, case  # the frames before the cut, then the error


def test_corrupt_mp4_ends_with_an_error(cases: dict[str, Any]) -> None:
    case = _case(cases, "corrupt")
    assert case["done"], f"the page hung on a corrupt MP4: {case}"
    error = case["error"] or ""
    assert error.startswith("corrupt.mp4: the browser cannot decode this video after "), case
    assert error.endswith("it may be corrupt"), case


def test_mp4_without_its_moov_ends_with_an_error(cases: dict[str, Any]) -> None:
    case = _case(cases, "no_moov")
    assert case["done"], case
    error = case["error"] or ""
    assert error.startswith("no-moov.mp4: no movie header ('moov' box)"), case
    assert "truncated or corrupt" in error and case["frames"] == 0, case


def test_mp4_too_large_for_a_canvas_is_refused(cases: dict[str, Any]) -> None:
    case = _case(cases, "too_wide")
    assert case["done"] and case["frames"] == 0, case
    assert (case["error"] or "").startswith("wide.mp4 is 40000×48: too large"), case


def test_webm_still_plays_in_a_video(cases: dict[str, Any]) -> None:
    case = _case(cases, "webm")
    assert case["done"] and case["error"] is None and case["frames"] > 0, case
    assert f"clip.webm: {VIDEO} (not an MP4/MOV file)" in _lines(case)[-1], case
    assert not any(WEBCODECS in t for t in _lines(case)), case


def test_mp4_the_decoder_refuses_falls_back_to_a_video(cases: dict[str, Any]) -> None:
    case = _case(cases, "mp4v")
    assert case["done"], case
    line = _lines(case)[-1]
    assert line.startswith(f"mp4v.mp4: {VIDEO} (") and "mp4v" in line[len("mp4v.mp4"):], case
    # Chromium plays no MPEG-4 Part 2 either: the <video> path's own error, naming the file.
    assert "mp4v.mp4" in (case["error"] or ""), case


def test_stop_ends_an_mp4_run(cases: dict[str, Any]) -> None:
    case = _case(cases, "stop")
    assert case["done"], f"stop did not end the run: {case}"
    assert _lines(case)[0].startswith("stopped"), case
    assert case["frames"] < LONG_FRAMES, case


# -- with the CPU loaded ---------------------------------------------------------------------
@contextlib.contextmanager
def _busy_cpus(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 320×180 60-fps clip through the page while busy processes take every core, twice
    over (a <video> kept 82 to 104 of its 120 frames here, loaded or not)."""
    tmp = tmp_path_factory.mktemp("web-mp4-loaded")
    clip = _mp4(tmp / "fast.mp4", LOADED_FRAMES, size=(320, 180), fps=60)
    with _busy_cpus(4):
        return drive(tmp, [{"name": "loaded", "query": f"{W}w-load", "waitMs": 60000,
                            "files": [str(clip)]}])


def test_no_frame_is_lost_with_the_cpu_loaded(loaded: dict[str, Any]) -> None:
    case = _case(loaded, "loaded")
    assert case["done"] and case["error"] is None, case
    assert case["frames"] == LOADED_FRAMES, case

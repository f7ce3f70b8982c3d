"""The web page (``web/`` built into ``ttball/web/``) against ttball's Python reference.

- ``test_js_ports_match_python`` (Node only): the page's JavaScript ports — the resize (OpenCV's
  fixed-point INTER_LINEAR, bit for bit), the normalisation, sigmoid, detection and the
  FrameStream + tracker — run under Node on random inputs and equal ttball's Python.
- ``test_page_tracks_the_ball`` (headless Chromium): the built page, served by a real
  ``ttball serve`` app, runs a 72×128 export of the shipped weights with onnxruntime-web (WASM) on
  a drawn clip, then through the worker's session API, and both agree with ``ttball.track``.

The clip is fed as PNG frames, not as a video: a browser decodes video with its own decoder,
colour conversion and frame timing, so no comparison with OpenCV's frames could be exact. PNG
decodes losslessly on both sides, which lets the test require the page's network input to equal
Python's bit for bit; what is left between the two runs is the runtime's rounding (onnxruntime-web
WASM against eager torch), and the post-processing is checked exactly by replaying the browser's
own logits through the Python FrameStream.

Needs ``node`` (with ``web/node_modules`` from ``npm ci``), Debian's ``chromium`` and a build
(``make web``); skipped without them, failed instead when ``TTBALL_REQUIRE_BROWSER=1`` (CI).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import torch
from conftest import with_exif_orientation

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "web"
SITE = REPO / "ttball" / "web"
ARTIFACTS = REPO / "out" / "test-artifacts"
INPUT_SIZE = (72, 128)  # (height, width): 16x fewer FLOPs than 288x512, still finds the ball
CLIP_SIZE = (320, 180)  # (width, height): not a multiple of the input size
CLIP_FRAMES = 9
DUPLICATE = 4  # frame 4 repeats frame 3: both sides must drop it and give it frame 3's row
PAGE_TIMEOUT_S = 150


def _missing(reason: str) -> None:
    if os.environ.get("TTBALL_REQUIRE_BROWSER"):
        pytest.fail(f"{reason} (TTBALL_REQUIRE_BROWSER is set)")
    pytest.skip(reason)


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        _missing("node not found: apt-get install -y nodejs npm (Node >= 18)")
    return str(node)


def _chromium() -> str:
    path = os.environ.get("TTBALL_CHROMIUM") or shutil.which("chromium")
    if not path:
        _missing("chromium not found: apt-get install -y chromium (or set TTBALL_CHROMIUM)")
    return str(path)


def _built_site() -> Path:
    if not (WEB / "node_modules" / "playwright-core").is_dir() or not (SITE / "app.js").is_file():
        _missing("the web page is not built: run `make web` (cd web && npm ci && npm run build)")
    built = (SITE / "app.js").stat().st_mtime
    sources = [*(WEB / "src").glob("*.js"), *(WEB / "static").iterdir(), WEB / "build.mjs"]
    stale = [p.name for p in sources if p.stat().st_mtime > built]
    if stale:
        pytest.fail(f"ttball/web is older than {', '.join(stale)}: run `make web`")
    return SITE


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()


def _unb64(text: str, dtype: Any) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=dtype)


def _rgba(rgb: np.ndarray) -> np.ndarray:
    return np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 255, np.uint8)], axis=2)


def _run_ports(job: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [_node(), str(WEB / "tools" / "port_check.mjs")], input=json.dumps(job).encode(),
        capture_output=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout)


# -- the ports, under Node ----------------------------------------------------------------------
def _blob_frames(rng: np.random.Generator, count: int, size: tuple[int, int]) -> list[np.ndarray]:
    """Dark RGB frames with 0–3 bright red blobs, some far apart; some frames exact repeats."""
    w, h = size
    frames: list[np.ndarray] = []
    for i in range(count):
        if i and rng.random() < 0.2:
            frames.append(frames[-1].copy())
            continue
        img = rng.integers(0, 40, (h, w, 3), dtype=np.uint8)
        for _ in range(int(rng.integers(0, 4))):
            centre = (int(rng.integers(0, w)), int(rng.integers(0, h)))
            axes = (int(rng.integers(4, 40)), int(rng.integers(4, 25)))
            cv2.ellipse(img, centre, axes, float(rng.uniform(0, 180)), 0, 360,
                        (int(rng.integers(150, 256)), 80, 80), -1)
        frames.append(img)
    return frames


def _python_stream_rows(frames: list[np.ndarray], config: Any, step: int) -> list[Any]:
    from ttball.frames import Frame
    from ttball.stream import FrameStream, StreamOptions

    stream = FrameStream(config, StreamOptions(step=step))
    rows = []

    def complete(windows: list[Any]) -> None:
        for w in windows:  # the fake network of port_check.mjs: each frame's red plane / 255
            rows.extend(stream.complete(w, w.pixels[[0, 3, 6]].astype(np.float32) / np.float32(255)))

    for i, rgb in enumerate(frames):
        complete(stream.push(Frame(i, i / 30, rgb)))
    complete(stream.finish())
    return rows + stream.drain()


def _assert_rows_equal(js_rows: list[dict[str, Any]], py_rows: list[Any], tol: float) -> None:
    assert [r["frame"] for r in js_rows] == [r.frame for r in py_rows]
    assert [r["visible"] for r in js_rows] == [r.visible for r in py_rows]
    for js, py in zip(js_rows, py_rows):
        for key, value in (("x", py.x), ("y", py.y), ("blur_angle_deg", py.blur_angle_deg),
                           ("blur_length_px", py.blur_length_px), ("score", py.score)):
            assert js[key] == pytest.approx(value, rel=tol, abs=tol), (py.frame, key)


def test_js_ports_match_python() -> None:
    from ttball.frames import normalize, resize
    from ttball.model.config import WeightsConfig
    from ttball.postprocess import FrameGeometry, detect

    rng = np.random.default_rng(0)
    sizes = [((320, 180), (128, 72)), ((1280, 720), (512, 288)), ((1920, 1080), (512, 288)),
             ((333, 177), (128, 72)), ((256, 144), (128, 72)), ((100, 60), (512, 288)),
             ((128, 72), (128, 72)), ((500, 280), (512, 288))]
    images = []
    for (sw, sh), (w, h) in sizes:
        noise = rng.integers(0, 256, (sh, sw, 3), dtype=np.uint8)
        images += [(noise, w, h), (cv2.GaussianBlur(noise, (0, 0), 3), w, h)]
    windows = [rng.integers(0, 256, (9, 72, 128), dtype=np.uint8) for _ in range(2)]
    logits = np.concatenate([rng.normal(0, 4, 5000), rng.normal(0, 1e-6, 200), [0.0, 1e-8, -1e-8],
                             rng.uniform(-90, 90, 200)]).astype(np.float32)
    maps = []
    for h, w, sw, sh, threshold in [(72, 128, 1280, 720, 0.5), (72, 128, 320, 180, 0.7),
                                    (37, 51, 640, 480, 0.5), (288, 512, 1920, 1080, 0.5)]:
        noise = cv2.GaussianBlur(rng.random((h, w)).astype(np.float32), (0, 0), 1.5)
        prob = np.clip((noise - noise.mean()) * 12 + 0.3, 0, 1).astype(np.float32)
        maps.append((prob, w, h, sw, sh, threshold))
    streams = [(_blob_frames(rng, n, (960, 540)), step) for n, step in
               [(1, 3), (2, 3), (7, 3), (11, 3), (12, 1), (5, 1)]]
    base = _blob_frames(rng, 6, (960, 540))  # repeats of a window's last frame after it ran
    streams.append(([*base[:3], base[2].copy(), *base[3:], base[5].copy()], 3))
    stream_config = WeightsConfig(input_height=36, input_width=64)

    out = _run_ports({
        "resize": [{"data": _b64(_rgba(img)), "W": img.shape[1], "H": img.shape[0], "w": w, "h": h}
                   for img, w, h in images],
        "normalize": [{"pixels": _b64(p), "w": 128, "h": 72, "mean": [0.485, 0.456, 0.406],
                       "std": [0.229, 0.224, 0.225]} for p in windows],
        "sigmoid": [{"logits": _b64(logits)}],
        "detect": [{"prob": _b64(p), "w": w, "h": h, "sw": sw, "sh": sh, "threshold": t}
                   for p, w, h, sw, sh, t in maps],
        "stream": [{"frames": [{"data": _b64(_rgba(f)), "W": 960, "H": 540, "index": i,
                                "time": i / 30} for i, f in enumerate(frames)],
                    "config": {"inputWidth": 64, "inputHeight": 36, "scoreThreshold": 0.5},
                    "step": step, "maxJumpPx": 300} for frames, step in streams],
    })

    for (img, w, h), got in zip(images, out["resize"]):
        expected = resize(img, WeightsConfig(input_height=h, input_width=w))
        assert np.array_equal(_unb64(got, np.uint8).reshape(3, h, w), expected), img.shape
    for pixels, got in zip(windows, out["normalize"]):
        expected = normalize(torch.from_numpy(pixels)[None], WeightsConfig())[0].numpy()
        assert np.array_equal(_unb64(got, np.float32).reshape(pixels.shape), expected)
    expected = torch.sigmoid(torch.from_numpy(logits)).numpy()
    np.testing.assert_allclose(_unb64(out["sigmoid"][0], np.float32), expected, rtol=3e-7, atol=1e-7)
    for (prob, w, h, sw, sh, t), got in zip(maps, out["detect"]):
        want = detect(prob, FrameGeometry(sw, sh, w, h), t)
        assert len(want) > 3 and len(got) == len(want), (w, h, len(got), len(want))
        for g, d in zip(got, want):
            for key, value in (("x", d.x), ("y", d.y), ("score", d.score),
                               ("angle", d.blur_angle_deg), ("length", d.blur_length_px)):
                assert g[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key
    for (frames, step), got in zip(streams, out["stream"]):
        want = _python_stream_rows(frames, stream_config, step)
        assert len(want) == len(frames)
        _assert_rows_equal(got, want, 1e-9)
    moved = [r for (frames, _), rows in zip(streams, out["stream"]) for r in rows if r["visible"]]
    assert len(moved) > 10  # the fake network found blobs: the comparison compared something


# -- the page, in Chromium ----------------------------------------------------------------------
EXIF_FRAME = 6  # written as a JPEG whose EXIF orientation (6) says "turn 90°": used as stored
PNG_EXIF_FRAME = 7  # a PNG with the same tag in an eXIf chunk


def _draw_clip(folder: Path) -> list[tuple[float, float]]:
    """PNG frames of a white ball on a parabola over a table, frame ``EXIF_FRAME`` a JPEG and
    frame ``PNG_EXIF_FRAME`` a PNG with an EXIF orientation (the browser, the worker and
    ``ttball.track`` all read them as stored, or each would be a turned frame of another
    size); returns the ball's centres."""
    folder.mkdir(parents=True, exist_ok=True)
    w, h = CLIP_SIZE
    centres, img = [], None
    for i in range(CLIP_FRAMES):
        j = i - 1 if i >= DUPLICATE else i
        if i != DUPLICATE:
            img = np.full((h, w, 3), (28, 34, 40), np.uint8)  # BGR
            cv2.rectangle(img, (int(w * .1), int(h * .55)), (int(w * .9), int(h * .9)), (110, 60, 20), -1)
            cv2.line(img, (int(w * .1), int(h * .55)), (int(w * .9), int(h * .55)), (255, 255, 255), 2)
            cv2.line(img, (w // 2, int(h * .5)), (w // 2, int(h * .6)), (200, 200, 200), 2)
            t = j / (CLIP_FRAMES - 2)
            cx, cy = w * .15 + t * w * .7, h * .75 - h * .6 * 4 * t * (1 - t)
            cv2.circle(img, (round(cx), round(cy)), 5, (255, 255, 255), -1, cv2.LINE_AA)
        assert img is not None
        if i == EXIF_FRAME:
            jpeg = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
            (folder / f"frame_{i:03d}.jpg").write_bytes(with_exif_orientation(jpeg, 6))
        elif i == PNG_EXIF_FRAME:
            png = cv2.imencode(".png", img)[1].tobytes()
            (folder / f"frame_{i:03d}.png").write_bytes(with_exif_orientation(png, 6))
        else:
            cv2.imwrite(str(folder / f"frame_{i:03d}.png"), img)
        centres.append((cx, cy))
    return centres


@pytest.fixture(scope="module")
def web_model(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config):
    """(model, checkpoint, onnx): the shipped weights at a 72×128 input, saved and exported."""
    from ttball.export import onnx as export
    from ttball.model import load_model, save_checkpoint

    model = load_model()
    model.config = model.config.evolve(input_height=INPUT_SIZE[0], input_width=INPUT_SIZE[1])
    folder = tmp_path_factory.mktemp("web-model")
    weights = folder / "small.safetensors"
    save_checkpoint(weights, model, model.config)
    # Exporting takes ~15 s on a busy 2-core machine: keep the file, keyed by what made it.
    key = hashlib.sha256(
        f"{model.config.sha256}|{INPUT_SIZE}|{torch.__version__}".encode()
        + Path(export.__file__).read_bytes()
    ).hexdigest()[:16]
    cache = getattr(pytestconfig, "cache", None)  # absent under -p no:cacheprovider
    cached = (cache.mkdir("ttball-web-onnx") if cache else folder) / f"{key}.onnx"
    if not cached.is_file():
        export.export_onnx(model, cached, height=INPUT_SIZE[0], width=INPUT_SIZE[1])
    return model, weights, cached


@contextlib.contextmanager
def _static_server(folder: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def _server(site: Path, weights: Path) -> Iterator[tuple[str, bool]]:
    """(url, has_worker): a real ``ttball serve`` app when there is one, else a static server."""
    try:
        from ttball.serve import ServeSettings, create_app
        from ttball.serve.app import serve_in_thread
    except ImportError:
        with _static_server(site) as url:
            yield url, False
        return
    settings = ServeSettings(weights=str(weights), device="cpu", warmup_batches=(1,),
                             web_dir=str(site))
    with serve_in_thread(create_app(settings)) as url:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url, True


def _drive(job: dict[str, Any], folder: Path) -> dict[str, Any]:
    job_path, out_path = folder / "job.json", folder / "out.json"
    job["out"] = str(out_path)
    job_path.write_text(json.dumps(job))
    proc = subprocess.run([_node(), str(REPO / "scripts" / "browser_check.js"), str(job_path)],
                          capture_output=True, timeout=PAGE_TIMEOUT_S + 60, check=False)
    logs = json.loads(out_path.read_text())["logs"] if out_path.is_file() else []
    assert proc.returncode == 0, proc.stderr.decode() + "\n".join(logs[-30:])
    result = json.loads(out_path.read_text())
    for run in result["runs"]:
        assert run["error"] is None, f"{run['name']}: {run['error']}\n" + "\n".join(logs[-30:])
    return result


def _replay(frames: Path, config: Any, debug: dict[str, Any], onnx_path: Path) -> list[Any]:
    """The browser's logits through the Python FrameStream; checks its inputs on the way."""
    from ttball.export.onnx import ort_logits
    from ttball.frames import FrameSource, normalize
    from ttball.stream import FrameStream, StreamOptions

    h, w = INPUT_SIZE
    stream = FrameStream(config, StreamOptions(step=3))
    windows = []
    for frame in FrameSource(frames):
        windows += stream.push(frame)
    windows += stream.finish()
    browser = debug["windows"]
    assert len(browser) == len(windows)
    rows = []
    for window, seen in zip(windows, browser):
        expected = normalize(torch.from_numpy(window.pixels)[None], config).numpy()
        given = _unb64(seen["input"], np.float32).reshape(1, 9, h, w)
        assert np.array_equal(given, expected), "the page's network input differs from Python's"
        logits = _unb64(seen["logits"], np.float32).reshape(1, 3, h, w)
        # onnxruntime-web (WASM) against onnxruntime (CPU) on the same file and input.
        assert np.abs(logits - ort_logits(onnx_path, given)).max() < 1e-3
        rows += stream.complete(window, torch.sigmoid(torch.from_numpy(logits)).numpy()[0])
    return rows + stream.drain()


def _assert_close_to(rows: list[dict[str, Any]], reference: list[Any], px: float, name: str) -> float:
    assert [r["frame"] for r in rows] == [r.frame for r in reference], name
    assert [r["visible"] for r in rows] == [r.visible for r in reference], name
    worst = max((max(abs(r["x"] - e.x), abs(r["y"] - e.y))
                 for r, e in zip(rows, reference) if e.visible), default=0.0)
    assert worst <= px, f"{name}: a ball {worst:.3f} px from the reference"
    return worst


@pytest.mark.browser
@pytest.mark.slow
def test_page_tracks_the_ball(tmp_path: Path, web_model: tuple[Any, Path, Path]) -> None:
    import ttball

    chromium, built = _chromium(), _built_site()
    model, weights, onnx_path = web_model
    frames = tmp_path / "frames"
    centres = _draw_clip(frames)
    reference = ttball.track(frames, model=model, device="cpu", step=3).rows
    assert all(r.visible for r in reference), "ttball.track misses the drawn ball: weights changed?"

    site = tmp_path / "site"
    shutil.copytree(built, site)
    shutil.copy(onnx_path, site / "model.onnx")  # the page's default model, beside it
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with _server(site, weights) as (url, has_worker):
        runs = [{"name": "browser", "mode": "browser", "ep": "wasm", "debug": True,
                 "screenshot": str(ARTIFACTS / "web.png")}]
        if has_worker:
            runs.append({"name": "worker", "mode": "worker",
                         "screenshot": str(ARTIFACTS / "web-worker.png")})
        result = _drive({"chromium": chromium, "url": f"{url}/",
                         "frames": sorted(str(p) for p in frames.glob("frame_*")),
                         "timeoutMs": PAGE_TIMEOUT_S * 1000, "runs": runs}, tmp_path)
    page = {r["name"]: r for r in result["runs"]}

    browser = page["browser"]
    assert "in the browser" in browser["status"]["mode"] and "WASM" in browser["status"]["mode"]
    assert browser["status"]["framesPerS"] > 0 and "frames/s" in browser["status"]["text"]
    assert f"input {INPUT_SIZE[1]}×{INPUT_SIZE[0]}" in browser["modelStatus"]  # read from the file
    # The port, exactly: the browser's own logits through Python give the browser's rows.
    replayed = _replay(frames, model.config, browser["debug"], onnx_path)
    js_rows = [{**r, "blur_angle_deg": r["angle"], "blur_length_px": r["length"]}
               for r in browser["results"]]
    _assert_rows_equal(js_rows, replayed, 1e-6)
    # End to end: the same balls as `ttball.track` (eager torch), and where they were drawn.
    worst = _assert_close_to(browser["results"], reference, 1.0, "in-browser mode")
    for r, (cx, cy) in zip(browser["results"], centres):
        assert np.hypot(r["x"] - cx, r["y"] - cy) < 3.0, r
    print(f"\nin-browser: {len(reference)} frames, {browser['seconds']:.1f} s, "
          f"max {worst:.2e} px from ttball.track; screenshot {ARTIFACTS / 'web.png'}")

    if has_worker:
        worker = page["worker"]
        assert "through the worker" in worker["status"]["mode"]
        worst = _assert_close_to(worker["results"], reference, 1.0, "worker mode")
        print(f"worker: {worker['seconds']:.1f} s, max {worst:.2e} px from ttball.track; "
              f"screenshot {ARTIFACTS / 'web-worker.png'}")

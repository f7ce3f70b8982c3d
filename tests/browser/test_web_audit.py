"""The web page against bad input (the page audit): each case a clear message or a clean end,
never a frozen page, a silent all-black frame or made-up balls.

One headless Chromium (Debian's, through playwright-core from ``web/node_modules``) drives the
built page, served with a fake ttball worker under ``/w/`` (one row per frame) and misbehaving
ones (``/slow1/`` its first session's frames slow, ``/busy/`` a 429 once, ``/e500/``, ``/hang/``, ``/html/``), which record their requests
(``/KIND-TAG/`` is ``/KIND/``, its requests told apart by the tag) and each session's options.
Tiny ONNX files stand in for wrong models; videos are VP8 WebM written by OpenCV. Same
requirements as ``test_web.py`` (node, chromium, ``make web``).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import shutil
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np
import pytest
from test_web import REPO, _built_site, _chromium, _node

pytestmark = pytest.mark.browser

DRIVER = r"""
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { createRequire } = require('node:module');
const { chromium } = createRequire(path.join(process.env.TTBALL_WEB, 'package.json'))('playwright-core');

async function one(context, job, c) {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  if (c.init) await page.addInitScript(c.init);  // before the page's own scripts
  await page.goto(`${job.url}/?${c.query || ''}`);
  await page.evaluate(() => window.ttballReady);
  if (c.timeouts) await page.evaluate((t) => { window.ttballTimeouts = t; }, c.timeouts);
  for (const [selector, value] of Object.entries(c.fields || {})) await page.fill(selector, value);
  if (c.model) {
    await page.setInputFiles('#model-file', c.model);
    await page.waitForTimeout(300);
  }
  if (c.files) await page.setInputFiles('#source', c.files);
  if (c.files2) {
    await page.waitForTimeout(c.secondAfterMs);
    await page.setInputFiles('#source', c.files2);
  }
  if (c.stopAfterMs) {
    await page.waitForTimeout(c.stopAfterMs);
    await page.click('#stop');
  }
  if (c.click) await page.click(c.click);
  let done = true;
  if (c.files || c.click) {
    try {
      await page.waitForFunction(() => window.ttballDone === true, null, { timeout: c.waitMs, polling: 100 });
    } catch {
      done = false;
    }
  }
  await page.waitForTimeout(c.settleMs || 0);
  const out = await page.evaluate(() => ({
    error: window.ttballError ?? null,
    frames: (window.ttballResults || []).length,
    log: [...document.querySelectorAll('#log div')].map((d) => ({ text: d.textContent, error: d.className === 'error' })),
    modelStatus: document.getElementById('model-status').innerText,
    probe: window.ttballProbe ?? null,  // what a case's init script recorded
  }));
  await page.close();
  return { name: c.name, done, pageErrors: errors, ...out };
}

(async () => {
  const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ttball-audit-'));
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: job.chromium, headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', '--autoplay-policy=no-user-gesture-required'],
  });
  const results = {};
  try {
    // One page at a time: a background page gets no video frames (requestVideoFrameCallback).
    for (const c of job.cases) results[c.name] = await one(context, job, c);
  } finally {
    await context.close();
    fs.rmSync(dir, { recursive: true, force: true });
    fs.writeFileSync(job.out, JSON.stringify(results));
  }
})().catch((e) => { console.error(e && e.stack ? e.stack : e); process.exit(1); });
"""


class _Worker(http.server.SimpleHTTPRequestHandler):
    """The site, plus fake workers under /KIND/v1/... (see the module's docstring)."""

    requests: ClassVar[list[str]] = []
    busy_once: ClassVar[set[str]] = set()
    sessions: ClassVar[dict[str, int]] = {}
    options: ClassVar[dict[str, Any]] = {}  # "/KIND/sN": the JSON body that opened session sN

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _fake(self) -> bool:
        tagged, _, rest = self.path[1:].partition("/")
        kind = tagged.partition("-")[0]
        if kind not in ("w", "slow1", "busy", "e500", "hang", "html"):
            return False
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size) if size else b""
        self.requests.append(f"{self.command} /{tagged}/{rest}")
        if kind == "hang":
            time.sleep(30)
            return True
        if kind == "html":
            body = b"<html><body>hello</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return True
        if rest == "v1":
            self._json(200, {"backend": "fake", "device": "cpu"})
        elif rest == "v1/sessions":
            self.sessions[tagged] = self.sessions.get(tagged, 0) + 1
            self.options[f"/{tagged}/s{self.sessions[tagged]}"] = json.loads(body or b"null")
            self._json(201, {"id": f"s{self.sessions[tagged]}"})
        elif "/frames?" in rest:
            frame = int(rest.split("frame=")[1])
            if frame == 2 and kind == "busy" and tagged not in self.busy_once:
                self.busy_once.add(tagged)
                self._json(429, {"error": {"code": "overloaded", "message": "queue full"}}, {"Retry-After": "1"})
            elif frame == 2 and kind == "e500":
                self._json(500, {"error": {"code": "internal", "message": "boom"}})
            else:
                time.sleep((0.6 if rest.startswith("v1/sessions/s1/") else 0.01) if kind == "slow1" else 0.05)
                self._json(200, {"results": [{"frame": frame, "time_s": 0.0, "visible": False}]})
        else:
            self._json(200, {"results": []})
        return True

    def do_GET(self) -> None:
        if not self._fake():
            super().do_GET()

    def do_POST(self) -> None:
        if not self._fake():
            self._json(405, {})

    def do_DELETE(self) -> None:
        if not self._fake():
            self._json(405, {})


@contextlib.contextmanager
def _serve(folder: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Worker, directory=str(folder)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _onnx(path: Path, elem_type: int, out_dims: list[int] | None) -> str:
    """A model that passes its input `frames` [1, 9, 8, 16] through: output shape as declared."""
    import onnx
    from onnx import helper

    x = helper.make_tensor_value_info("frames", elem_type, [1, 9, 8, 16])
    y = helper.make_tensor_value_info("heatmaps", elem_type, out_dims)
    graph = helper.make_graph([helper.make_node("Identity", ["frames"], ["heatmaps"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def _png(path: Path, width: int, height: int) -> str:
    """A white 1-bit greyscale PNG, written row by row (any size, a few bytes a row)."""
    row = b"\x00" + b"\xff" * ((width + 7) // 8)
    raw = zlib.compress(row * height, 9)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", raw) + chunk(b"IEND", b""))
    return str(path)


def _webm(path: Path, frames: int, size: tuple[int, int] = (160, 96), fps: float = 30) -> str:
    w, h = size
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"VP80"), fps, (w, h))
    assert writer.isOpened(), "OpenCV cannot write VP8 WebM"
    rng = np.random.default_rng(frames)
    for _ in range(frames):
        writer.write(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    writer.release()
    return str(path)


def _with_bad_frame(path: Path, nth: int) -> str:
    """The WebM with its ``nth`` inter frame's VP8 tag claiming a first partition far past the
    frame (libvpx: corrupt partition): the browser plays the frames before it, then fails to
    decode (a cut or garbled tail the demuxer takes for the end instead)."""
    data = bytearray(path.read_bytes())
    inter, i = [], 0
    while i < len(data) - 8:  # SimpleBlock (0xA3): size vint, track 0x81, timecode (2), flags
        width = next((k + 1 for k in range(8) if data[i + 1] & (0x80 >> k)), 0) if data[i] == 0xA3 else 0
        if width:
            size = int.from_bytes(data[i + 1:i + 1 + width], "big") & ((1 << (7 * width)) - 1)
            head = i + 1 + width
            if data[head] == 0x81 and data[head + 3] in (0x00, 0x80) and 10 < size <= len(data) - head:
                if data[head + 3] == 0x00:
                    inter.append(head + 4)
                i = head + size
                continue
        i += 1
    frame = inter[nth]
    data[frame:frame + 3] = b"\xf1\xff\xff"  # inter frame, shown, first partition 2^19 - 1 bytes
    path.write_bytes(bytes(data))
    return str(path)


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case in one Chromium, a page each; {name: result} and the worker requests."""
    tmp = tmp_path_factory.mktemp("web-audit")
    media = tmp / "media"
    media.mkdir()
    frames = []
    for i in range(4):
        frames.append(str(media / f"f{i}.png"))
        cv2.imwrite(frames[-1], np.full((36, 64, 3), 40 * i, np.uint8))
    broken = _with_bad_frame(Path(_webm(media / "broken.webm", 60)), 25)
    models = tmp / "models"
    models.mkdir()
    w = "mode=worker&worker="
    cases: list[dict[str, Any]] = [
        {"name": "broken_video", "query": f"{w}/w", "files": [broken], "waitMs": 25000},
        # The first run is in a slow request when the second starts: it winds down (pausing its
        # video) while the second waits for frames.
        {"name": "second_video", "query": f"{w}/slow1", "files": [_webm(media / "long.webm", 90)],
         "files2": [_webm(media / "short.webm", 45)], "secondAfterMs": 1200, "waitMs": 20000},
        {"name": "hang_then_stop", "query": f"{w}/hang", "files": frames, "stopAfterMs": 1500, "waitMs": 5000},
        {"name": "huge_image", "query": f"{w}/w", "files": [_png(media / "huge.png", 40000, 16)], "waitMs": 15000},
        {"name": "fp16_model", "model": _onnx(models / "fp16.onnx", 10, [1, 3, 8, 16])},
        {"name": "wrong_output_declared", "model": _onnx(models / "nine.onnx", 1, [1, 9, 8, 16])},
        {"name": "wrong_output_at_run", "model": _onnx(models / "shapeless.onnx", 1, None),
         "files": frames, "waitMs": 25000},
        {"name": "busy_once", "query": f"{w}/busy", "files": frames, "waitMs": 15000},
        {"name": "e500", "query": f"{w}/e500", "files": frames, "waitMs": 15000, "settleMs": 500},
        {"name": "html", "query": f"{w}/html", "files": frames, "waitMs": 15000},
    ]
    return drive(tmp, cases)


def drive(tmp: Path, cases: list[dict[str, Any]]) -> dict[str, Any]:
    """``cases`` in one Chromium, a page each, on a copy of the built page served with the fake
    workers (``worker=/KIND/`` in a query: theirs); {"cases": {name: result}, "requests": the
    workers' requests, "options": each session's options}."""
    chromium, site = _chromium(), tmp / "site"
    shutil.copytree(_built_site(), site, dirs_exist_ok=True)
    _Worker.requests = []
    _Worker.busy_once = set()
    _Worker.sessions = {}
    _Worker.options = {}
    with _serve(site) as url:
        for c in cases:
            if "query" in c:
                c["query"] = c["query"].replace("worker=/", f"worker={url}/")
        job = {"chromium": chromium, "url": url, "cases": cases, "out": str(tmp / "out.json")}
        (tmp / "job.json").write_text(json.dumps(job))
        (tmp / "driver.cjs").write_text(DRIVER)
        proc = subprocess.run([_node(), str(tmp / "driver.cjs"), str(tmp / "job.json")],
                              capture_output=True, timeout=120, check=False,
                              env={"PATH": "/usr/bin:/bin", "TTBALL_WEB": str(REPO / "web")})
        assert proc.returncode == 0, proc.stderr.decode()
    return {"cases": json.loads((tmp / "out.json").read_text()), "requests": list(_Worker.requests),
            "options": dict(_Worker.options)}


def _case(audit: dict[str, Any], name: str) -> dict[str, Any]:
    case = audit["cases"][name]
    assert not case["pageErrors"], case
    return case


def test_broken_video_fails_with_a_message(audit: dict[str, Any]) -> None:
    case = _case(audit, "broken_video")
    assert case["done"], f"the page froze on a broken video: {case}"
    assert case["error"] and "broken.webm" in case["error"], case


def test_second_video_replaces_the_first(audit: dict[str, Any]) -> None:
    case = _case(audit, "second_video")
    assert case["done"] and case["error"] is None, case
    assert case["frames"] >= 40, case  # the second clip's frames (45; the browser may drop a few)
    assert any(line["text"].startswith("done:") for line in case["log"]), case
    # The first run's session, stopped mid-request, is dropped; the second's was finished.
    assert "DELETE /slow1/v1/sessions/s1" in audit["requests"], audit["requests"]
    assert "DELETE /slow1/v1/sessions/s2" not in audit["requests"], audit["requests"]


def test_stop_aborts_a_hanging_worker(audit: dict[str, Any]) -> None:
    case = _case(audit, "hang_then_stop")
    assert case["done"], f"stop did not end a run waiting on a worker: {case}"
    assert case["log"] and case["log"][0]["text"].startswith("stopped"), case


def test_huge_image_is_refused(audit: dict[str, Any]) -> None:
    case = _case(audit, "huge_image")
    assert case["done"] and case["error"], case
    assert "huge.png" in case["error"] and "too large" in case["error"], case


def test_fp16_model_is_refused_at_load(audit: dict[str, Any]) -> None:
    case = _case(audit, "fp16_model")
    errors = [line["text"] for line in case["log"] if line["error"]]
    assert errors and "fp16.onnx" in errors[0] and "FP16" in errors[0], case


def test_wrong_output_shape_is_refused(audit: dict[str, Any]) -> None:
    declared = _case(audit, "wrong_output_declared")
    errors = [line["text"] for line in declared["log"] if line["error"]]
    assert errors and "nine.onnx" in errors[0] and "expected [1, 3, 8, 16]" in errors[0], declared
    at_run = _case(audit, "wrong_output_at_run")
    assert at_run["done"] and at_run["error"], at_run
    assert "output has shape [1, 9, 8, 16]" in at_run["error"], at_run


def test_worker_429_is_retried(audit: dict[str, Any]) -> None:
    case = _case(audit, "busy_once")
    assert case["done"] and case["error"] is None, case
    assert case["frames"] == 4, case


def test_worker_error_deletes_the_session(audit: dict[str, Any]) -> None:
    case = _case(audit, "e500")
    assert case["done"] and "HTTP 500" in (case["error"] or ""), case
    assert "DELETE /e500/v1/sessions/s1" in audit["requests"], audit["requests"]


def test_html_server_is_not_a_worker(audit: dict[str, Any]) -> None:
    case = _case(audit, "html")
    assert case["done"] and case["error"], case
    assert "ttball worker" in case["error"] and "not a JSON object" in case["error"], case

"""A small client for ``ttball serve`` (httpx; the WebSocket stream needs ``websockets``).

::

    from ttball.client import Client

    with Client("http://127.0.0.1:8000") as c:
        c.wait_ready()
        s = c.open_session(step=3)
        for jpeg in jpegs:
            for row in s.send(jpeg):            # rows of frames whose window completed
                print(row["frame"], row["visible"], row["x"], row["y"])
        rows = s.finish()                        # the last rows; closes the session

        with c.open_session().stream() as ws:    # WebSocket: send without waiting
            ws.send(jpeg)
            row = ws.recv()                      # {"type": "result", "frame": 0, ...}

        heatmaps = c.infer(windows)              # /v2: (B, 9, H, W) float32 → logits (B, 3, H, W)

A frame is JPEG/PNG bytes or, for :meth:`Session.send` only, an RGB ``(H, W, 3) uint8`` array
(the WebSocket and ``send_many`` carry encoded images only); read a file's bytes first
(``Path(p).read_bytes()``). Rows are :class:`ttball.results.FrameResult` as dicts. Errors raise
:class:`ServeError` with the server's ``code`` and message; bad arguments raise ``TypeError`` or
``ValueError`` before anything is sent.
"""

from __future__ import annotations

import json
import math
import os
import struct
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, Self

import httpx
import numpy as np

Row = dict[str, Any]


class ServeError(Exception):
    """A 4xx/5xx answer: ``status``, the server's ``code`` and its message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


def _raise_for(response: httpx.Response) -> None:
    if not response.is_success:
        _raise_error(response.status_code, response.content)


def _raise_error(status: int, body: bytes) -> NoReturn:
    """Raise the worker's answer ``status`` with ``body`` as a :class:`ServeError`."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict):
        raise ServeError(status, error.get("code", "error"), error.get("message", ""))
    raise ServeError(status, "error", str(error or body.decode(errors="replace")))


_BYTES = (bytes, bytearray, memoryview)


def _image_bytes(image: object, what: str = "image", arrays: bool = False) -> bytes:
    """``image`` as the bytes of an encoded frame; TypeError naming what it takes otherwise."""
    if isinstance(image, _BYTES):
        return bytes(image)
    takes = "JPEG/PNG bytes" + (" or an RGB (H, W, 3) uint8 numpy array" if arrays else "")
    hint = ""
    if isinstance(image, (str, os.PathLike)):
        hint = "; to send a file, read it first: Path(p).read_bytes()"
    elif isinstance(image, np.ndarray):
        hint = " (arrays go through Session.send, which sends them raw)"
    raise TypeError(f"{what}: expected {takes}, got {type(image).__name__}{hint}")


def encode_frame(image: bytes | np.ndarray) -> tuple[bytes, str, dict[str, int]]:
    """Body, Content-Type and query for one frame: JPEG/PNG bytes as they are, an RGB array
    ``(H, W, 3) uint8`` raw."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"expected an RGB (H, W, 3) uint8 array, got {image.dtype} {image.shape}")
        h, w = image.shape[:2]
        return np.ascontiguousarray(image).tobytes(), "application/octet-stream", {"width": w, "height": h}
    data = _image_bytes(image, arrays=True)
    kind = "image/png" if data[:4] == b"\x89PNG" else "image/jpeg"
    return data, kind, {}


def pack_records(images: Iterable[bytes]) -> bytes:
    """``application/x-ttball-frames``: ``[u32 big-endian length][bytes]`` per frame."""
    if isinstance(images, (*_BYTES, str, os.PathLike, np.ndarray)) or not isinstance(
            images, Iterable):
        raise TypeError(f"images: expected a list of JPEG/PNG bytes, got one "
                        f"{type(images).__name__} (Session.send sends one frame)")
    records = [_image_bytes(b, f"images[{i}]") for i, b in enumerate(images)]
    return b"".join(struct.pack(">I", len(b)) + b for b in records)


class Client:
    """Synchronous client of one worker. ``token``: the server's ``--token``."""

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None,
                 timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    # -- health ----------------------------------------------------------------------------------
    def alive(self) -> bool:
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def readiness(self) -> Row:
        body: Row = self.http.get("/readyz").json()
        return body

    def wait_ready(self, timeout: float = 600.0, poll: float = 0.5) -> Row:
        """Block until ``/readyz`` is 200; raises ``TimeoutError`` or ServeError (start-up failed)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                r = self.http.get("/readyz")
                body = r.json()
                if r.status_code == 200:
                    return body  # type: ignore[no-any-return]
                if body.get("phase") == "failed":
                    raise ServeError(503, "startup_failed", str(body.get("error")))
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.url} not ready after {timeout:.0f} s")
            time.sleep(poll)

    def info(self) -> Row:
        return self._json("GET", "/v1")

    def metrics(self) -> str:
        r = self.http.get("/metrics")
        _raise_for(r)
        return r.text

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        r = self.http.request(method, path, **kwargs)
        _raise_for(r)
        return r.json()

    # -- sessions and videos -------------------------------------------------------------------
    def open_session(self, step: int = 3, threshold: float | None = None,
                     width: int | None = None, height: int | None = None,
                     dedup_ssim: float | None = None, fps: float | None = None) -> Session:
        options = {"step": step, "threshold": threshold, "width": width, "height": height,
                   "dedup_ssim": dedup_ssim, "fps": fps}
        for name, value in options.items():  # JSON has no NaN or infinity
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"open_session: {name} must be a finite number, got {value}")
        body = self._json("POST", "/v1/sessions",
                          json={k: v for k, v in options.items() if v is not None})
        return Session(self, body["id"], stream_url(self.url, body))

    def track(self, video: str | Path, step: int = 3,
              threshold: float | None = None) -> Iterator[Row]:
        """POST a whole video; yields rows as they finish, then ``{"summary": ...}``."""
        params: dict[str, Any] = {"step": step}
        if threshold is not None:
            params["threshold"] = threshold
        path = Path(video)
        with path.open("rb") as f, self.http.stream(
            "POST", "/v1/track", content=f, params=params,
            headers={"Content-Type": "video/mp4"}, timeout=None,
        ) as r:
            if not r.is_success:
                r.read()
                _raise_for(r)
            for line in r.iter_lines():
                if line.strip():
                    yield json.loads(line)

    # -- the raw network (Open Inference Protocol) ------------------------------------------
    def infer(self, frames: np.ndarray, binary: bool = True) -> np.ndarray:
        """``frames (B, 9, H, W) float32`` (normalised) → logits ``(B, 3, H, W)`` float32."""
        given = np.asarray(frames)
        if given.dtype.kind != "f":
            raise TypeError(f"infer: frames are preprocessed float32 windows (B, 9, H, W), "
                            f"normalised as ttball.frames.preprocess does; got {given.dtype}")
        x = np.ascontiguousarray(given, dtype="<f4")
        spec: Row = {"name": "frames", "shape": list(x.shape), "datatype": "FP32"}
        request: Row = {"inputs": [spec],
                        "outputs": [{"name": "heatmaps", "parameters": {"binary_data": binary}}]}
        if binary:
            spec["parameters"] = {"binary_data_size": x.nbytes}
            head = json.dumps(request).encode()
            r = self.http.post("/v2/models/blurball/infer", content=head + x.tobytes(), headers={
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(len(head))})
        else:
            spec["data"] = x.ravel().tolist()
            r = self.http.post("/v2/models/blurball/infer", json=request)
        _raise_for(r)
        return parse_infer_response(r.content, r.headers.get("Inference-Header-Content-Length"))


def parse_infer_response(body: bytes, header_length: str | None) -> np.ndarray:
    """The ``heatmaps`` tensor of a /v2 infer response (JSON data or binary section)."""
    n = int(header_length) if header_length else len(body)
    reply = json.loads(body[:n])
    out = reply["outputs"][0]
    size = (out.get("parameters") or {}).get("binary_data_size")
    if size is not None:
        data = np.frombuffer(body[n:n + size], dtype="<f4")
    else:
        data = np.asarray(out["data"], dtype=np.float32)
    return data.reshape(out["shape"]).astype(np.float32)


class Session:
    """One match on the worker. Send frames in order; rows come back as windows complete."""

    def __init__(self, client: Client, session_id: str, ws_url: str) -> None:
        """``ws_url``: where the session's WebSocket is served (:func:`stream_url`)."""
        self.client, self.id, self.ws_url = client, session_id, ws_url

    def send(self, image: bytes | np.ndarray, frame: int | None = None,
             t: float | None = None) -> list[Row]:
        body, kind, query = encode_frame(image)
        params: dict[str, Any] = {**query, **({"frame": frame} if frame is not None else {}),
                  **({"t": t} if t is not None else {})}
        reply = self.client._json("POST", f"/v1/sessions/{self.id}/frames", content=body,
                                  params=params, headers={"Content-Type": kind})
        return reply["results"]  # type: ignore[no-any-return]

    def send_many(self, images: Iterable[bytes]) -> list[Row]:
        """Several JPEG/PNG frames (a list of bytes) in one request
        (``application/x-ttball-frames``)."""
        reply = self.client._json("POST", f"/v1/sessions/{self.id}/frames",
                                  content=pack_records(images),
                                  headers={"Content-Type": "application/x-ttball-frames"})
        return reply["results"]  # type: ignore[no-any-return]

    def finish(self) -> list[Row]:
        return self.client._json("POST", f"/v1/sessions/{self.id}/finish")["results"]  # type: ignore[no-any-return]

    def delete(self) -> None:
        self.client._json("DELETE", f"/v1/sessions/{self.id}")

    def describe(self) -> Row:
        return self.client._json("GET", f"/v1/sessions/{self.id}")  # type: ignore[no-any-return]

    def stream(self) -> Stream:
        return Stream(self)


def stream_url(base_url: str, session: dict[str, Any]) -> str:
    """Where the WebSocket of ``session`` (the body of ``POST /v1/sessions``) is served: its
    ``stream_url`` when the worker names one (``serve --ray --direct-streams``: the replica that
    holds it), else the worker's own route."""
    return session.get("stream_url") or (
        base_url.replace("http", "ws", 1) + f"/v1/sessions/{session['id']}/stream")


class Stream:
    """The session's WebSocket: ``send`` frames freely; ``recv`` messages in order."""

    def __init__(self, session: Session) -> None:
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect

        client = session.client
        url = session.ws_url
        headers = {"Authorization": f"Bearer {client.token}"} if client.token else None
        # compression=None: frames are JPEG/PNG already; permessage-deflate would only spend
        # ~7 ms of CPU per 1280x720 frame on each side (it capped `ttball loadtest` at ~130 fps).
        # ping_timeout as the worker's (ttball.serve.app.UVICORN_WS): a worker at its in-flight
        # limit reads the socket late, and our pings wait behind the frames queued there.
        try:
            self.ws = connect(url, additional_headers=headers, max_size=None, compression=None,
                              ping_timeout=120)
        except InvalidStatus as exc:  # refused before it opened: the worker's JSON error
            _raise_error(exc.response.status_code, bytes(exc.response.body or b""))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.ws.close()

    def send(self, image: bytes) -> None:
        """One JPEG/PNG frame. Arrays are refused: the WebSocket carries encoded images only
        (encode it, e.g. with ``cv2.imencode``, or send it with :meth:`Session.send`)."""
        self.ws.send(_image_bytes(image))

    def recv(self, timeout: float | None = 60.0) -> Row:
        return json.loads(self.ws.recv(timeout))  # type: ignore[no-any-return]

    def finish(self, timeout: float = 120.0) -> list[Row]:
        """Send ``finish``; every message until ``end`` (results and errors), in order."""
        self.ws.send(json.dumps({"type": "finish"}))
        messages = []
        while (message := self.recv(timeout))["type"] != "end":
            messages.append(message)
        return messages

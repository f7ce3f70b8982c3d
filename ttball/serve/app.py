"""``create_app(settings)``: the worker's ASGI app. Routes (details in docs/serve.md)::

    GET  /healthz  /readyz  /metrics  /v1                  liveness, readiness, Prometheus, info
    POST /v1/sessions                  {step, threshold, width, height, dedup, fps} → {id, ...}
    GET  /v1/sessions[/{id}]           open sessions
    POST /v1/sessions/{id}/frames      JPEG/PNG, raw RGB or records → rows finished so far
    POST /v1/sessions/{id}/finish      the last rows; closes the session
    DEL  /v1/sessions/{id}
    WS   /v1/sessions/{id}/stream      binary frames in, JSON rows out, in order
    POST /v1/track                     a whole video → NDJSON rows as they finish
    /v2/...                            the Open Inference Protocol (see oip.py)
    /                                  the web page, when ttball/web/index.html exists

The inference routes answer 503 until start-up (load, build, warm-up, verify: see
:class:`~ttball.serve.worker.Worker`) has finished; ``/healthz`` answers from the first second.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect

from ttball import __version__
from ttball.errors import UserError
from ttball.serve.batcher import Overloaded
from ttball.serve.metrics import Metrics
from ttball.serve.sessions import Feeder, Session, SessionOptions, SessionStore
from ttball.serve.settings import ApiError, ServeSettings
from ttball.serve.uploads import read_body, split_body
from ttball.serve.worker import Worker

OPEN_PATHS = ("/healthz", "/readyz", "/v2/health/live", "/v2/health/ready")
PROTECTED_PREFIXES = ("/v1", "/v2", "/metrics")
JSON_LIMIT = 64 * 1024  # bytes of a session-options body
VIDEO_SUFFIXES = {"video/mp4": ".mp4", "video/quicktime": ".mov", "video/x-msvideo": ".avi",
                  "video/x-matroska": ".mkv", "video/webm": ".webm"}


# -- auth and request metrics (one pure ASGI middleware) ------------------------------------------
class Gate:
    """Bearer-token check for /v1, /v2 (not /v2/health) and /metrics; request metrics."""

    def __init__(self, app: ASGIApp, token: str | None, metrics: Metrics) -> None:
        self.app, self.token, self.metrics = app, token, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if self.token and not self._allowed(scope):
            await self._refuse(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}
        start = time.perf_counter()

        async def send_wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapped)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(route, scope["method"], str(status["code"])).inc()
            self.metrics.request_seconds.labels(route).observe(time.perf_counter() - start)

    def _allowed(self, scope: Scope) -> bool:
        path = scope["path"]
        if path in OPEN_PATHS or not path.startswith(PROTECTED_PREFIXES):
            return True
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"authorization", b"").decode("latin-1")
        if given.lower().startswith("bearer "):
            given = given[7:].strip()
        elif scope["type"] == "websocket":  # browsers can't set headers on a WebSocket
            from urllib.parse import parse_qs

            given = parse_qs(scope.get("query_string", b"").decode()).get("token", [""])[0]
        return hmac.compare_digest(given.encode(), (self.token or "").encode())

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.metrics.errors.labels("unauthorized").inc()
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
            return
        body = ApiError(401, "unauthorized", "missing or wrong bearer token").body()
        if scope["path"].startswith("/v2"):
            body = {"error": "missing or wrong bearer token"}
        response = JSONResponse(body, 401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


# -- errors --------------------------------------------------------------------------------------
def _error_response(request: Request, exc: ApiError, metrics: Metrics) -> JSONResponse:
    metrics.errors.labels(exc.code).inc()
    body: dict[str, Any] = exc.body()
    if request.url.path.startswith("/v2"):
        body = {"error": exc.message}  # the Open Inference Protocol's error object
    return JSONResponse(body, exc.status, headers=exc.headers)


def _add_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return _error_response(request, exc, metrics)

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        where = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}"
                          for e in exc.errors())
        return _error_response(request, ApiError(422, "bad_request", where), metrics)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid)


# -- the app -------------------------------------------------------------------------------------
def create_app(settings: ServeSettings | None = None) -> FastAPI:
    """The worker for ``settings`` (defaults: eager FP32 on loopback, batches 1, 2, 3)."""
    from ttball.serve import oip

    settings = settings or ServeSettings()
    settings.validate()
    metrics = Metrics()
    worker = Worker(settings, metrics)
    app = FastAPI(title="ttball worker", version=__version__, lifespan=worker.lifespan,
                  docs_url="/docs", redoc_url=None)
    app.state.worker = worker
    _add_error_handlers(app, metrics)
    app.add_middleware(Gate, token=settings.token, metrics=metrics)
    _add_health(app, worker)
    _add_sessions(app, worker)
    _add_track(app, worker)
    app.include_router(oip.router(worker))
    _mount_web(app, settings)  # last: API routes win
    return app


def stream_app(worker: Worker) -> FastAPI:
    """Only the session WebSocket of a running ``worker`` (its lifespan is the caller's): what a
    ``serve --ray --direct-streams`` replica serves on its own port. Same token, same errors."""
    app = FastAPI(title="ttball worker streams", version=__version__, docs_url=None,
                  redoc_url=None, openapi_url=None)
    _add_error_handlers(app, worker.metrics)
    app.add_middleware(Gate, token=worker.settings.token, metrics=worker.metrics)
    _add_stream(app, worker)
    return app


def _add_health(app: FastAPI, worker: Worker) -> None:
    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "alive", "phase": worker.phase}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        return JSONResponse(worker.readiness(), 200 if worker.ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        if worker.batcher is not None:
            worker.metrics.queue_depth.set(worker.batcher.depth)
        return Response(worker.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1")
    async def info() -> dict[str, Any]:
        return worker.info()


def _rows(session: Session) -> list[dict[str, Any]]:
    return [r.as_dict() for r in session.take()]


def _live(worker: Worker) -> tuple[SessionStore, Feeder]:
    worker.require_ready()
    assert worker.store is not None and worker.feeder is not None
    return worker.store, worker.feeder


def _add_sessions(app: FastAPI, worker: Worker) -> None:
    settings = worker.settings

    @app.post("/v1/sessions", status_code=201)
    async def create_session(request: Request) -> JSONResponse:
        store, _ = _live(worker)
        body = await read_body(request, JSON_LIMIT)
        try:
            data = json.loads(body) if body.strip() else {}
        except ValueError as exc:
            raise ApiError(400, "bad_json", f"session options are not JSON: {exc}") from None
        session = store.create(SessionOptions.from_json(data))
        return JSONResponse(session.describe(), 201,
                            headers={"Location": f"/v1/sessions/{session.id}"})

    @app.get("/v1/sessions")
    async def list_sessions() -> dict[str, Any]:
        store, _ = _live(worker)
        return {"sessions": [s.describe() for s in store.all()]}

    @app.get("/v1/sessions/{sid}")
    async def get_session(sid: str) -> dict[str, Any]:
        store, _ = _live(worker)
        return store.get(sid).describe()

    @app.post("/v1/sessions/{sid}/frames")
    async def post_frames(sid: str, request: Request, frame: int | None = None,
                          t: float | None = None, width: int | None = None,
                          height: int | None = None) -> dict[str, Any]:
        store, feeder = _live(worker)
        session = store.get(sid)
        if session.attached:
            raise ApiError(409, "session_busy", f"session {sid} is driven by a WebSocket")
        body = await read_body(request, settings.max_body_bytes)
        parts = split_body(request.headers.get("content-type", ""), body, settings, width, height)
        async with session.lock:
            step = await feeder.push(session, parts, frame, t)
            await asyncio.shield(step)  # a client gone mid-request leaves its rows in the outbox
            rows = _rows(session)
        return {"session": sid, "accepted": len(parts), "last_frame": session.last_index,
                "results": rows, "pending_frames": session.stream.pending_frames}

    @app.post("/v1/sessions/{sid}/finish")
    async def finish(sid: str) -> dict[str, Any]:
        store, feeder = _live(worker)
        session = store.get(sid)
        async with session.lock:
            step = await feeder.finish(session)
            await asyncio.shield(step)
            rows = _rows(session)
        store.remove(sid, "finished")
        return {"session": sid, "results": rows, "frames": session.stream.frames_in,
                "windows": session.stream.windows_out}

    @app.delete("/v1/sessions/{sid}")
    async def delete(sid: str) -> dict[str, Any]:
        store, _ = _live(worker)
        if store.remove(sid, "deleted") is None:
            raise ApiError(404, "unknown_session", f"no session {sid!r}")
        return {"deleted": sid}

    _add_stream(app, worker)


def _add_stream(app: FastAPI, worker: Worker) -> None:
    settings = worker.settings

    @app.websocket("/v1/sessions/{sid}/stream")
    async def stream(ws: WebSocket, sid: str) -> None:
        await ws.accept()
        try:
            store, feeder = _live(worker)
            session = store.get(sid)
            if session.attached or session.lock.locked():
                raise ApiError(409, "session_busy", f"session {sid} is busy")
        except ApiError as exc:
            await ws.send_json({"type": "error", **exc.body()})
            await ws.close(4000 + exc.status, exc.code)
            return
        session.attached = True
        outcome = "disconnected"
        try:
            async with session.lock:
                outcome = await _websocket_session(ws, session, feeder, settings)
        finally:
            session.attached = False
            session.touch()
            if outcome != "open":
                store.remove(sid, outcome)


async def _websocket_session(ws: WebSocket, session: Session, feeder: Feeder,
                             settings: ServeSettings) -> str:
    """Binary messages: one JPEG/PNG frame each (every message takes the next frame number,
    even one refused). Text ``{"type": "finish"}``: run the last windows, send the last rows,
    ``{"type": "end"}`` and close. Out: ``{"type": "result", ...row}`` in frame order, and
    ``{"type": "error", "frame": N, "error": {...}}`` for a refused frame (the stream goes on).

    Returns ``finished`` or ``disconnected`` (the session is then removed: its queued windows
    are dropped).
    """
    outbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(settings.max_ws_inflight)
    sender = asyncio.get_running_loop().create_task(_ws_sender(ws, session, outbox))

    async def finish() -> str:
        try:
            item: tuple[str, Any] = ("step", await feeder.finish(session))
        except ApiError as exc:
            item = ("error", (None, exc))
        return await ws_end(ws, outbox, sender, item)

    try:
        return await ws_receive(ws, outbox, sender,
                                lambda data: _ws_frame(session, feeder, settings, data), finish)
    finally:
        if session.tail is not None and not session.tail.done():
            session.tail.cancel()


async def ws_receive(
    ws: WebSocket, outbox: asyncio.Queue[tuple[str, Any]], sender: asyncio.Task[None],
    on_frame: Callable[[bytes], Awaitable[tuple[str, Any]]],
    on_finish: Callable[[], Awaitable[str]],
) -> str:
    """The receiving half of the session WebSocket (this worker's and ``serve --ray``'s): each
    binary message becomes ``on_frame(data)``'s outbox item, ``{"type": "finish"}`` hands over
    to ``on_finish``, other text is a ``bad_message`` error. Returns ``finished`` or
    ``disconnected``; stops ``sender`` when the client is gone."""
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return "disconnected"
            if message.get("bytes") is not None:
                item = await on_frame(message["bytes"])
            elif _is_finish(message.get("text")):
                return await on_finish()
            else:
                item = ("error", (None, ApiError(400, "bad_message",
                                                 'text messages: {"type": "finish"} only')))
            if not await _queue(outbox, item, sender):
                return "disconnected"
    except WebSocketDisconnect:
        return "disconnected"
    finally:
        if not sender.done():
            sender.cancel()
        elif not sender.cancelled():
            sender.exception()  # retrieved: a client gone mid-send is not an error here


async def ws_end(ws: WebSocket, outbox: asyncio.Queue[tuple[str, Any]],
                 sender: asyncio.Task[None], last: tuple[str, Any]) -> str:
    """Queue the last item and the ``end`` message, wait until they are sent, close."""
    for item in (last, ("end", None)):
        if not await _queue(outbox, item, sender):
            return "disconnected"
    await sender
    await ws.close(1000)
    return "finished"


async def _queue(outbox: asyncio.Queue[tuple[str, Any]], item: tuple[str, Any],
                 sender: asyncio.Task[None]) -> bool:
    """Put ``item`` for the sender; False if the sender died (client gone) while we waited."""
    put = asyncio.ensure_future(outbox.put(item))
    await asyncio.wait({put, sender}, return_when=asyncio.FIRST_COMPLETED)
    if not put.done():
        put.cancel()
        return False
    return True


async def _ws_frame(session: Session, feeder: Feeder, settings: ServeSettings,
                    data: bytes) -> tuple[str, Any]:
    index = session.last_index + 1
    try:
        parts = split_body("image/jpeg", data, settings)
        return "step", await feeder.push(session, parts)
    except ApiError as exc:
        session.last_index = max(session.last_index, index)  # the number is used up
        return "error", (index, exc)


def _is_finish(text: str | None) -> bool:
    try:
        return bool(text) and json.loads(text or "").get("type") == "finish"
    except (ValueError, AttributeError):
        return False


async def _ws_sender(ws: WebSocket, session: Session,
                     outbox: asyncio.Queue[tuple[str, Any]]) -> None:
    while True:
        kind, item = await outbox.get()
        if kind == "step":
            try:
                await item
            except ApiError as exc:  # a frame refused after queueing (exc.frame), or a failure
                await ws.send_json({"type": "error", "frame": exc.frame, **exc.body()})
            for row in _rows(session):
                await ws.send_json({"type": "result", **row})
        elif kind == "error":
            index, error = item
            await ws.send_json({"type": "error", "frame": index, **error.body()})
        else:
            await ws.send_json({"type": "end", "frames": session.stream.frames_in})
            return


# -- /v1/track: a whole video ----------------------------------------------------------------------
def _add_track(app: FastAPI, worker: Worker) -> None:
    @app.post("/v1/track")
    async def track(request: Request, step: int = 3, threshold: float | None = None,
                    dedup_ssim: float | None = None) -> StreamingResponse:
        from ttball.frames import FrameSource

        store, feeder = _live(worker)
        options = SessionOptions.from_json(
            {"step": step, "threshold": threshold, "dedup_ssim": dedup_ssim})
        path = await _spool(request, worker.settings.max_video_bytes)
        try:
            source = await asyncio.to_thread(FrameSource, path)
        except UserError as exc:
            path.unlink(missing_ok=True)
            raise ApiError(400, "bad_video", str(exc).replace(str(path), "the body")) from None
        session = Session(f"track-{id(path)}", options,
                          store.new_stream(options, f"track-{id(path)}"), source.info.fps)
        lines = _track_lines(source, session, feeder, worker.settings.max_ws_inflight, path)
        return StreamingResponse(lines, media_type="application/x-ndjson")


async def _spool(request: Request, limit: int) -> Path:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    fd, name = tempfile.mkstemp(prefix="ttball-track-", suffix=VIDEO_SUFFIXES.get(kind, ".mp4"))
    path, size = Path(name), 0
    try:
        with os.fdopen(fd, "wb") as f:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, "body_too_large", f"video over the limit of {limit} bytes")
                f.write(chunk)
        if size == 0:
            raise ApiError(400, "empty_body", "POST the video file as the request body")
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


async def _track_lines(source: Any, session: Session, feeder: Feeder, inflight: int,
                       path: Path) -> AsyncIterator[bytes]:
    """NDJSON: one row per frame as it finishes, then ``{"summary": ...}`` (or ``{"error"}``)."""
    started = time.perf_counter()
    frames = iter(source)
    steps: deque[asyncio.Task[None]] = deque()
    count = 0
    try:
        while (frame := await asyncio.to_thread(next, frames, None)) is not None:
            steps.append(await _push_waiting(feeder, session, frame))
            while steps and (len(steps) > inflight or steps[0].done()):
                await steps.popleft()
                for row in _rows(session):
                    count += 1
                    yield _line(row)
        steps.append(await feeder.finish(session))
        for step in steps:
            await step
        for row in _rows(session):
            count += 1
            yield _line(row)
        if session.stream.frames_in < 3:
            raise ApiError(400, "video_too_short",
                           f"{session.stream.frames_in} readable frame(s); at least 3 are needed")
        elapsed = time.perf_counter() - started
        yield _line({"summary": {"frames": count, "windows": session.stream.windows_out,
                                 "duplicates": session.stream.duplicates,
                                 "corrupt_frames": len(source.info.corrupt_frames),
                                 "seconds": round(elapsed, 3),
                                 "frames_per_s": round(count / elapsed, 2) if elapsed else 0.0}})
    except ApiError as exc:
        yield _line(exc.body())
    finally:
        for step in steps:
            step.cancel()
        path.unlink(missing_ok=True)


async def _push_waiting(feeder: Feeder, session: Session, frame: Any) -> asyncio.Task[None]:
    """A video waits for room in the queue (it has no real-time deadline) instead of a 429."""
    while True:
        try:
            return await feeder.push_frames(session, [frame])
        except Overloaded:
            await asyncio.sleep(0.005)


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def _mount_web(app: FastAPI, settings: ServeSettings) -> None:
    """Serve the web page (``ttball/web/index.html`` and assets) at ``/``."""
    from fastapi.staticfiles import StaticFiles

    web = Path(settings.web_dir) if settings.web_dir else Path(__file__).parent.parent / "web"
    if (web / "index.html").is_file():
        app.mount("/", StaticFiles(directory=web, html=True), name="web")


@contextmanager
def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0,
                    log_level: str = "warning", loop: str = "auto",
                    ws: str = "auto") -> Iterator[str]:
    """Run ``app`` with uvicorn in a background thread (tests, notebooks); yields its base URL.

    ``port=0`` takes a free port. ``loop``: uvicorn's event loop, ``"auto"`` (uvloop where it
    is installed), ``"asyncio"`` or ``"uvloop"``; ``ws``: its WebSocket implementation
    (``"auto"``: websockets' sans-I/O protocol). Leaving the block shuts the server down
    gracefully.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="on", loop=loop,
                                           ws=ws, ws_per_message_deflate=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="ttball-uvicorn", daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the server thread died during start-up")
            time.sleep(0.01)
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()

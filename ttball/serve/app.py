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
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache, partial
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ttball import __version__
from ttball.errors import UserError
from ttball.serve.metrics import Metrics
from ttball.serve.sessions import SessionOptions
from ttball.serve.settings import ApiError, ServeSettings
from ttball.serve.track import add_track
from ttball.serve.uploads import parse_json, read_body, split_body
from ttball.serve.websocket import add_stream, held, refuse_attached, refuse_busy
from ttball.serve.worker import Worker

OPEN_PATHS = ("/healthz", "/readyz", "/v2/health/live", "/v2/health/ready")
PROTECTED_PREFIXES = ("/v1", "/v2", "/metrics")
JSON_LIMIT = 64 * 1024  # bytes of a session-options body
HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}  # the framework's own errors
# uvicorn's WebSocket options for ttball's servers: no permessage-deflate (frames are JPEG/PNG:
# inflating them costs the event loop CPU for nothing), and a keepalive timeout well above the
# 20 s default. A stream at its in-flight limit is not read (back-pressure), so its client's
# pong waits behind the frames queued ahead of it; on a CPU worker running ~3 frames/s that
# took over 20 s and the stream of a live client was dropped (1011). A client that is gone is
# still noticed, within ping interval + timeout.
UVICORN_WS: dict[str, Any] = {"ws_per_message_deflate": False, "ws_ping_interval": 20.0,
                              "ws_ping_timeout": 120.0}


def uvicorn_options(http: str = "auto", ws: str = "auto") -> dict[str, Any]:
    """uvicorn's options for ttball's servers: :data:`UVICORN_WS`, ``http``'s protocol
    (uvicorn's name: ``"auto"``, ``"httptools"`` or ``"h11"``) as :func:`json_400_protocol`
    and ``ws``'s as :func:`json_ws_protocol`."""
    return {**UVICORN_WS, "http": json_400_protocol(http), "ws": json_ws_protocol(ws)}


@cache
def json_400_protocol(http: str = "auto") -> type:
    """uvicorn's HTTP protocol ``http`` (``"auto"``: httptools where installed, else h11) whose
    answer to a request it cannot parse is ttball's JSON error body,
    ``{"error": {"code": "bad_request", ...}}``, instead of uvicorn's plain text; the request
    never reaches the application."""
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    base = import_from_string(HTTP_PROTOCOLS[http])

    class Json400Protocol(base):  # type: ignore[misc, valid-type]
        def send_400_response(self, msg: str) -> None:
            body = json.dumps({"error": {"code": "bad_request", "message": msg}}).encode()
            head = [b"HTTP/1.1 400 Bad Request"]
            head += [name + b": " + value for name, value in self.server_state.default_headers]
            head += [b"content-type: application/json", b"content-length: %d" % len(body),
                     b"connection: close", b"", b""]
            self.transport.write(b"\r\n".join(head) + body)
            self.transport.close()

    return Json400Protocol


@cache
def json_ws_protocol(ws: str = "auto") -> Any:
    """uvicorn's WebSocket protocol ``ws``; for ``"auto"`` and ``"websockets-sansio"``
    (websockets' sans-I/O protocol, what ``"auto"`` picks where websockets is installed) one
    whose refusals of a handshake (a malformed upgrade request, such as no
    ``Sec-WebSocket-Key`` or a wrong ``Sec-WebSocket-Version``: 400; headers too large: 431; a
    close before the handshake: 403) carry ttball's JSON error body, the code named by the
    status, instead of plain text. Other names are uvicorn's own."""
    if ws not in ("auto", "websockets-sansio"):
        return ws
    try:
        from uvicorn.protocols.websockets.websockets_sansio_impl import (
            WebSocketsSansIOProtocol,
        )
    except ImportError:  # no websockets (uvicorn's "auto" takes wsproto), or an older uvicorn
        return ws

    class JsonRejectProtocol(WebSocketsSansIOProtocol):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.conn.reject = partial(_json_reject, self.conn.reject)  # type: ignore[method-assign]

    return JsonRejectProtocol


def _json_reject(reject: Callable[[Any, str], Any], status: Any, text: str) -> Any:
    """websockets' ``ServerProtocol.reject`` with ttball's JSON error body for its text."""
    from http import HTTPStatus

    from websockets.http11 import Response

    plain = reject(status, text)
    phrase = HTTPStatus(plain.status_code).phrase
    message = text.strip() or f"the WebSocket handshake was refused ({phrase})"
    body = json.dumps({"error": {"code": phrase.lower().replace(" ", "_").replace("-", "_"),
                                 "message": message}}).encode()
    headers = plain.headers.copy()
    del headers["Content-Type"], headers["Content-Length"]
    headers["Content-Length"] = str(len(body))
    headers["Content-Type"] = "application/json"
    return Response(plain.status_code, plain.reason_phrase, headers, body)

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
            await self.app(scope, receive, self._json_denials(scope, send))
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

    def _json_denials(self, scope: Scope, send: Send) -> Send:
        """``send`` for a WebSocket, with a refusal before the handshake (the framework's when no
        route matches: a bare close, which uvicorn answers with an empty 403) answered as
        ttball's JSON error, 404 ``not_found``, where the server offers the WebSocket denial
        response (uvicorn does; elsewhere the close stands)."""
        accepted = False

        async def send_wrapped(message: Message) -> None:
            nonlocal accepted
            if message["type"] == "websocket.accept":
                accepted = True
            elif message["type"] == "websocket.close" and not accepted and "route" not in scope:
                error = ApiError(404, "not_found",
                                 f"no WebSocket is served at {scope['path']}; a session's stream "
                                 "is /v1/sessions/{id}/stream")
                if await _deny(scope, send, error):
                    self.metrics.errors.labels(error.code).inc()
                    return
            await send(message)

        return send_wrapped

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.metrics.errors.labels("unauthorized").inc()
        if scope["type"] == "websocket":
            error = ApiError(401, "unauthorized", "missing or wrong bearer token (from a browser: "
                             "?token= on the stream's URL)", headers={"WWW-Authenticate": "Bearer"})
            if not await _deny(scope, send, error):
                await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
            return
        body = ApiError(401, "unauthorized", "missing or wrong bearer token").body()
        if scope["path"].startswith("/v2"):
            body = {"error": "missing or wrong bearer token"}
        response = JSONResponse(body, 401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


async def _deny(scope: Scope, send: Send, error: ApiError) -> bool:
    """Refuse a WebSocket handshake with ``error`` as an HTTP answer and its JSON body, through
    the ASGI WebSocket denial response; False (nothing sent) where the server lacks it."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        return False
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    headers += [(name.lower().encode(), value.encode()) for name, value in error.headers.items()]
    await send({"type": "websocket.http.response.start", "status": error.status,
                "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})
    return True


# -- errors --------------------------------------------------------------------------------------
def _error_response(request: Request, exc: ApiError, metrics: Metrics) -> JSONResponse:
    metrics.errors.labels(exc.code).inc()
    body: dict[str, Any] = exc.body()
    if request.url.path.startswith("/v2"):
        body = {"error": exc.message}  # the Open Inference Protocol's error object
    return JSONResponse(body, exc.status, headers=exc.headers)


def add_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return _error_response(request, exc, metrics)

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        where = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}"
                          for e in exc.errors())
        return _error_response(request, ApiError(422, "bad_request", where), metrics)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = HTTP_CODES.get(exc.status_code, "http_error")
        message, where = str(exc.detail), f"{request.method} {request.url.path}"
        if exc.status_code == 404:
            message = f"no route for {where}"
            if request.url.path.startswith("/v1/sessions/") and \
                    request.url.path.endswith("/stream"):
                message += ": a session's stream is its WebSocket (ws:// or wss://)"
        elif exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow")
            message = f"{where} is not allowed" + (f"; allowed: {allowed}" if allowed else "")
        return _error_response(request, ApiError(exc.status_code, code, message,
                                                 dict(exc.headers or {})), metrics)

    async def gone(request: Request, exc: Exception) -> Response:
        # the client left before its body arrived: no one hears this answer, but the metrics
        # count it as the client's doing (nginx's 499), not a server error
        return _error_response(request, ApiError(499, "client_disconnected",
                                                 "the client closed the request"), metrics)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(ClientDisconnect, gone)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)  # unknown routes, wrong methods


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
    add_error_handlers(app, metrics)
    app.add_middleware(Gate, token=settings.token, metrics=metrics)
    _add_health(app, worker)
    _add_sessions(app, worker)
    add_track(app, worker)
    app.include_router(oip.router(worker))
    mount_web(app, settings)  # last: API routes win
    return app


def stream_app(worker: Worker) -> FastAPI:
    """Only the session WebSocket of a running ``worker`` (its lifespan is the caller's): what a
    ``serve --ray --direct-streams`` replica serves on its own port. Same token, same errors."""
    app = FastAPI(title="ttball worker streams", version=__version__, docs_url=None,
                  redoc_url=None, openapi_url=None)
    add_error_handlers(app, worker.metrics)
    app.add_middleware(Gate, token=worker.settings.token, metrics=worker.metrics)
    add_stream(app, worker)
    return app


def _add_health(app: FastAPI, worker: Worker) -> None:
    @app.api_route("/healthz", methods=["GET", "HEAD"])  # HEAD: probes that ask it
    async def healthz() -> dict[str, Any]:
        return {"status": "alive", "phase": worker.phase}

    @app.api_route("/readyz", methods=["GET", "HEAD"])
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

    @app.put("/v1/admin/settings")
    async def change_settings(request: Request) -> dict[str, Any]:
        """``--live-settings``: change a few settings while serving (measurement)."""
        return worker.change_settings(parse_json(await read_body(request, JSON_LIMIT),
                                                 "settings"))


def _add_sessions(app: FastAPI, worker: Worker) -> None:
    settings = worker.settings

    @app.post("/v1/sessions", status_code=201)
    async def create_session(request: Request) -> JSONResponse:
        store, _ = worker.live()
        body = await read_body(request, JSON_LIMIT)
        data = parse_json(body, "session options") if body.strip() else {}
        session = store.create(SessionOptions.from_json(data))
        try:
            return JSONResponse(session.describe(), 201,
                                headers={"Location": f"/v1/sessions/{session.id}"})
        except Exception:  # no client will know its id: it must not hold a slot
            store.remove(session.id, "failed")
            raise

    @app.get("/v1/sessions")
    async def list_sessions() -> dict[str, Any]:
        store, _ = worker.live()
        return {"sessions": [s.describe() for s in store.all()]}

    @app.get("/v1/sessions/{sid}")
    async def get_session(sid: str) -> dict[str, Any]:
        store, _ = worker.live()
        return store.get(sid).describe()

    @app.post("/v1/sessions/{sid}/frames")
    async def post_frames(sid: str, request: Request, frame: int | None = None,
                          t: float | None = None, width: int | None = None,
                          height: int | None = None) -> dict[str, Any]:
        store, feeder = worker.live()
        refuse_attached(store.get(sid), sid)  # before its body is read, and again after
        body = await read_body(request, settings.max_body_bytes)
        parts = split_body(request.headers.get("content-type", ""), body, settings, width, height)
        async with held(sid, lambda: store.get(sid)) as session:
            step = await feeder.push(session, parts, frame, t)
            await asyncio.shield(step)  # a client gone mid-request leaves its rows in the outbox
            rows = session.take_rows()
        return {"session": sid, "accepted": len(parts), "last_frame": session.last_index,
                "results": rows, "pending_frames": session.stream.pending_frames}

    @app.post("/v1/sessions/{sid}/finish")
    async def finish(sid: str) -> dict[str, Any]:
        store, feeder = worker.live()
        async with held(sid, lambda: store.get(sid)) as session:
            step = await feeder.finish(session)
            await asyncio.shield(step)
            rows = session.take_rows()
        store.remove(sid, "finished")
        return {"session": sid, "results": rows, "frames": session.stream.frames_in,
                "windows": session.stream.windows_out}

    @app.delete("/v1/sessions/{sid}")
    async def delete(sid: str) -> dict[str, Any]:
        store, _ = worker.live()
        refuse_busy(store.get(sid), sid)
        store.remove(sid, "deleted")
        return {"deleted": sid}

    add_stream(app, worker)


def mount_web(app: FastAPI, settings: ServeSettings) -> None:
    """Serve the web page (``ttball/web/index.html`` and assets) at ``/``."""
    from fastapi.staticfiles import StaticFiles
    from starlette.routing import Match

    class WebFiles(StaticFiles):
        """The page's files, mounted at ``/``, so every request no route takes whole comes
        here. A method other than GET/HEAD: 405 with the ``Allow`` of the API route at that
        path (``PUT /v1/sessions``), else 405 for a file of the page, else 404: StaticFiles'
        own 405 for all of them made a mistyped ``POST /v1/sesions`` look like a route."""

        async def get_response(self, path: str, scope: Scope) -> Response:
            if scope["method"] in ("GET", "HEAD"):
                return await super().get_response(path, scope)
            allowed = sorted({method for route in app.router.routes if route is not web_mount
                              and route.matches(scope)[0] == Match.PARTIAL
                              for method in getattr(route, "methods", None) or ()})
            if allowed:
                raise HTTPException(405, headers={"Allow": ", ".join(allowed)})
            try:
                _, found = await asyncio.to_thread(self.lookup_path, path)
            except (OSError, ValueError):
                found = None
            if found is None:
                raise HTTPException(404)
            return await super().get_response(path, scope)

    web = Path(settings.web_dir) if settings.web_dir else Path(__file__).parent.parent / "web"
    if (web / "index.html").is_file():
        app.mount("/", WebFiles(directory=web, html=True), name="web")
        web_mount = app.router.routes[-1]


# How long shutdown waits for WebSocket sessions that sent ``finish`` when uvicorn has no
# graceful timeout (``--graceful-timeout`` sets it otherwise)
FINISHING_WAIT_S = 30.0


def draining_server(config: Any, worker: Worker | None) -> Any:
    """A ``uvicorn.Server`` for ``config`` whose shutdown first stops accepting connections and
    waits (up to the graceful timeout) for ``worker``'s WebSocket sessions that have sent
    ``finish`` to send their last rows and ``end``; then uvicorn's own shutdown, which closes
    every WebSocket still open with 1012 (a stream that has not finished ends there), waits for
    the HTTP requests in flight, and runs the lifespan's end. uvicorn alone sent 1012 at once,
    so a session that had sent ``finish`` lost its last rows."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if worker is not None and worker.finishing.count:
                for server in self.servers:
                    server.close()  # (uvicorn's shutdown closes them again: harmless)
                limit = self.config.timeout_graceful_shutdown
                left = await worker.finishing.wait(FINISHING_WAIT_S if limit is None else limit)
                if left:
                    print(f"ttball serve: {left} WebSocket session(s) still finishing at "
                          f"shutdown: closed (1012)", flush=True)
            await super().shutdown(sockets)

    return DrainingServer(config)


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` for uvicorn's ``sockets``, SO_REUSEADDR as uvicorn
    sets it. Bound by the caller before the application starts, so a taken or unusable address
    is a one-line :class:`UserError` at once, not a log line after the model's load."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        sock.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(f"cannot listen on {host} port {port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


@contextmanager
def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0,
                    log_level: str = "warning", loop: str = "auto",
                    ws: str = "auto", http: str = "auto") -> Iterator[str]:
    """Run ``app`` with uvicorn in a background thread (tests, notebooks); yields its base URL.

    ``port=0`` takes a free port. ``loop``: uvicorn's event loop, ``"auto"`` (uvloop where it
    is installed), ``"asyncio"`` or ``"uvloop"``; ``ws``: its WebSocket implementation
    (``"auto"``: websockets' sans-I/O protocol); ``http``: its HTTP parser (``"auto"``,
    ``"httptools"``, ``"h11"``). Leaving the block shuts the server down
    gracefully.
    """
    import uvicorn

    sock = listen_socket(host, port)
    server = draining_server(uvicorn.Config(app, log_level=log_level, lifespan="on", loop=loop,
                                            **uvicorn_options(http, ws)),
                             getattr(app.state, "worker", None))
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

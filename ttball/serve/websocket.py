"""``WS /v1/sessions/{id}/stream``: a session's frames as binary messages in, its rows as JSON
out, in order (docs/serve.md). :func:`ws_receive` and :func:`ws_end` are shared with the Ray
ingress's stream (:mod:`ttball.distributed.serve_stream`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from typing import Any, Protocol, TypeVar

from fastapi import FastAPI, WebSocket
from starlette.websockets import WebSocketDisconnect

from ttball.serve.sessions import Feeder, Session, SessionStore
from ttball.serve.settings import ApiError, ServeSettings
from ttball.serve.uploads import parse_json, split_body
from ttball.serve.worker import Finishing, Worker


class Attachable(Protocol):
    """A session a WebSocket can drive: one socket or request at a time."""

    attached: bool
    lock: asyncio.Lock


S = TypeVar("S", bound=Attachable)


async def run_attached(ws: WebSocket, sid: str, lookup: Callable[[], S],
                       run: Callable[[S], Awaitable[str]],
                       detach: Callable[[S, str], Awaitable[None]]) -> None:
    """Accept ``ws``, find its session (``lookup``; an :class:`ApiError` there, or a session
    already driven, closes the socket with ``4000 + status``), hold it while ``run`` serves it,
    then ``detach(session, outcome)``: ``"open"`` if the client left it open, else why it
    ended. The single worker's stream and the Ray ingress's."""
    await ws.accept()
    try:
        session = lookup()
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
            outcome = await run(session)
    finally:
        session.attached = False
        await detach(session, outcome)


def refuse_attached(session: Attachable, sid: str) -> None:
    """409 for an HTTP request on a session a WebSocket drives: the socket holds the session's
    lock for its whole life, so the request would wait as long as the socket lives."""
    if session.attached:
        raise ApiError(409, "session_busy", f"session {sid} is driven by a WebSocket")


def refuse_busy(session: Attachable, sid: str) -> None:
    """409 for removing a session a WebSocket or a request is using (its steps would be
    cancelled under it: the socket's client would hear nothing more, the request fail)."""
    refuse_attached(session, sid)
    if session.lock.locked():
        raise ApiError(409, "session_busy", f"session {sid} has a request in progress")


@asynccontextmanager
async def held(sid: str, lookup: Callable[[], S]) -> AsyncIterator[S]:
    """The session for an HTTP request that feeds or finishes it, its lock held for the block:
    409 while a WebSocket drives it, and the lookup again once the lock is taken (404 if it
    was deleted or expired while this request waited for another's)."""
    session = lookup()
    refuse_attached(session, sid)
    async with session.lock:
        if lookup() is not session:
            raise ApiError(404, "unknown_session", f"session {sid} was closed meanwhile")
        yield session


def add_stream(app: FastAPI, worker: Worker) -> None:
    settings = worker.settings

    @app.websocket("/v1/sessions/{sid}/stream")
    async def stream(ws: WebSocket, sid: str) -> None:
        live: list[tuple[SessionStore, Feeder]] = []  # worker.live(), taken once by lookup

        def lookup() -> Session:
            live.append(worker.live())  # 503 before the worker is ready
            return live[0][0].get(sid)

        async def run(session: Session) -> str:
            return await websocket_session(ws, session, live[0][1], settings,
                                           worker.finishing)

        async def detach(session: Session, outcome: str) -> None:
            session.touch()
            if outcome != "open":
                live[0][0].remove(sid, outcome)

        await run_attached(ws, sid, lookup, run, detach)


async def websocket_session(ws: WebSocket, session: Session, feeder: Feeder,
                             settings: ServeSettings, finishing: Finishing | None = None) -> str:
    """Binary messages: one JPEG/PNG frame each (every message takes the next frame number,
    even one refused). Text ``{"type": "finish"}``: run the last windows, send the last rows,
    ``{"type": "end"}`` and close. Out: ``{"type": "result", ...row}`` in frame order, and
    ``{"type": "error", "frame": N, "error": {...}}`` for a refused frame (the stream goes on).

    Returns ``finished`` or ``disconnected`` (the session is then removed: its queued windows
    are dropped). From ``finish`` to ``end`` the session is held in ``finishing``, which
    shutdown waits for.
    """
    outbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(settings.max_ws_inflight)
    sender = asyncio.get_running_loop().create_task(_ws_sender(ws, session, outbox))

    async def finish() -> str:
        with finishing.hold() if finishing is not None else nullcontext():
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
    await asyncio.wait({sender})  # (not `await sender`: a sender that died must not raise here)
    if sender.cancelled() or sender.exception() is not None:
        return "disconnected"
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
    if not text:
        return False
    try:
        message = parse_json(text, "a message")
    except ApiError:  # not JSON, or nested too deeply to parse
        return False
    return isinstance(message, dict) and message.get("type") == "finish"


async def _ws_sender(ws: WebSocket, session: Session,
                     outbox: asyncio.Queue[tuple[str, Any]]) -> None:
    while True:
        kind, item = await outbox.get()
        if kind == "step":
            try:
                await item
            except ApiError as exc:  # a frame refused after queueing (exc.frame), or a failure
                await ws.send_json({"type": "error", "frame": exc.frame, **exc.body()})
            for row in session.take_rows():
                await ws.send_json({"type": "result", **row})
        elif kind == "error":
            index, error = item
            await ws.send_json({"type": "error", "frame": index, **error.body()})
        else:
            await ws.send_json({"type": "end", "frames": session.stream.frames_in})
            return


# -- /v1/track: a whole video ----------------------------------------------------------------------

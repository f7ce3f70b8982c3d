"""The WebSocket of ``serve --ray``: ``/v1/sessions/{id}/stream`` through the ingress.

The single worker's protocol (docs/serve.md). Each binary message is one call to the session's
replica, made at once: up to ``max_ws_inflight`` calls are in flight, the replica takes them in
their sequence order, and the sender answers them in that order. A call lost with its replica
gets a ``replica_lost`` error for its frame; so do the frames the dead replica held unanswered,
when the next reply says the session moved. Every frame gets exactly one answer.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import FastAPI, WebSocket

from ttball.distributed.serve_ingress import Ingress, RemoteSession, ReplicaLost
from ttball.serve.settings import ApiError
from ttball.serve.uploads import split_body
from ttball.serve.websocket import run_attached, ws_end, ws_receive


def add_stream(app: FastAPI, ingress: Ingress) -> None:
    @app.websocket("/v1/sessions/{sid}/stream")
    async def stream(ws: WebSocket, sid: str) -> None:
        async def detach(session: RemoteSession, outcome: str) -> None:
            session.last_seen = time.monotonic()
            if outcome == "disconnected":
                try:
                    await ingress.call(sid, "delete", sid)
                except ApiError as exc:
                    if exc.status == 409:  # a socket on its replica drives it: it stays
                        return
            if outcome != "open":
                ingress.forget(sid, outcome)

        await run_attached(ws, sid, lambda: ingress.session(sid),
                           lambda session: _websocket_session(ws, session, ingress), detach)


async def _websocket_session(ws: WebSocket, session: RemoteSession, ingress: Ingress) -> str:
    """The single worker's protocol (``ttball.serve.websocket.websocket_session``); each binary
    message is one call to the replica, up to ``max_ws_inflight`` of them in flight. With
    ``--direct-streams``, a session a socket on its replica drives is refused as a second
    socket on the single worker is (4409 ``session_busy``; each frame got that error before)."""
    if ingress.settings.direct_streams:
        try:
            driven = await ingress.call(session.id, "driven", session.id)
        except ApiError:
            driven = False  # its replica is gone: the session moves with the first frame
        if driven:
            busy = ApiError(409, "session_busy", f"session {session.id} is driven by a "
                            "WebSocket on its replica")
            await ws.send_json({"type": "error", **busy.body()})
            await ws.close(4409, busy.code)
            return "open"  # the other socket's: nothing to delete or forget
    outbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(ingress.settings.max_ws_inflight)
    sender = asyncio.get_running_loop().create_task(_ws_sender(ws, session, ingress, outbox))
    next_frame = session.last_index + 1

    async def frame(data: bytes) -> tuple[str, Any]:
        nonlocal next_frame
        next_frame += 1
        return _ws_frame(session, ingress, next_frame - 1, data)

    async def finish() -> str:
        last = ("step", (None, ingress.send_finish(session, next_frame)))
        return await ws_end(ws, outbox, sender, last)

    return await ws_receive(ws, outbox, sender, frame, finish)


def _ws_frame(session: RemoteSession, ingress: Ingress, index: int,
              data: bytes) -> tuple[str, Any]:
    try:
        parts = split_body("image/jpeg", data, ingress.settings)
    except ApiError as exc:
        return "error", (index, exc)
    return "step", (index, ingress.send_push(session, parts, frame=index))


async def _ws_sender(ws: WebSocket, session: RemoteSession, ingress: Ingress,
                     outbox: asyncio.Queue[tuple[str, Any]]) -> None:
    while True:
        kind, item = await outbox.get()
        if kind == "step":
            index, response = item
            try:
                reply = await ingress.result(response)
            except ApiError as exc:
                await ws.send_json({"type": "error", "frame": index, **exc.body()})
                continue
            moved = ingress.note(session, reply)
            if moved and moved["lost_frames"]:
                lost = ReplicaLost("this frame's row was still pending there")
                for k in range(moved["lost_frames"][0], moved["lost_frames"][1] + 1):
                    await ws.send_json({"type": "error", "frame": k, **lost.body()})
            for row in reply["results"]:
                await ws.send_json({"type": "result", **row})
        elif kind == "error":
            index, error = item
            await ws.send_json({"type": "error", "frame": index, **error.body()})
        else:
            await ws.send_json({"type": "end", "frames": session.frames})
            return

"""The routes of ``ttball serve --ray``'s ingress: health, sessions and ``/v1/track``.

The WebSocket route is in :mod:`.serve_stream`, KServe v2's in :mod:`ttball.serve.oip`; each
route's work is :class:`~.serve_ingress.Ingress`'s (the replicas, the sessions' counters).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ttball import __version__
from ttball.distributed.serve_ingress import Ingress, ReplicaLost, replica_error
from ttball.distributed.serve_metrics import merge
from ttball.distributed.serve_router import release
from ttball.distributed.serve_uploads import UPLOAD_PREFIX
from ttball.serve.app import JSON_LIMIT, Gate, add_error_handlers, mount_web
from ttball.serve.sessions import SessionOptions
from ttball.serve.settings import ApiError
from ttball.serve.track import body_pieces, video_suffix
from ttball.serve.uploads import parse_json, read_body, split_body
from ttball.serve.websocket import held, refuse_attached, refuse_busy


# -- the app -------------------------------------------------------------------------------------
def build_app(ingress: Ingress) -> FastAPI:
    from ttball.distributed.serve_stream import add_stream
    from ttball.serve import oip

    app = FastAPI(title="ttball worker (Ray Serve)", version=__version__,
                  lifespan=ingress.lifespan, docs_url="/docs", redoc_url=None)
    add_error_handlers(app, ingress.metrics)
    app.add_middleware(Gate, token=ingress.settings.token, metrics=ingress.metrics)
    _add_health(app, ingress)
    _add_sessions(app, ingress)
    add_stream(app, ingress)
    _add_track(app, ingress)
    app.include_router(oip.router(ingress))  # type: ignore[arg-type]
    mount_web(app, ingress.settings)
    return app


def _add_health(app: FastAPI, ingress: Ingress) -> None:
    @app.api_route("/healthz", methods=["GET", "HEAD"])  # HEAD: probes that ask it
    async def healthz() -> dict[str, Any]:
        return {"status": "alive", "phase": ingress.phase}

    @app.api_route("/readyz", methods=["GET", "HEAD"])
    async def readyz() -> JSONResponse:
        await ingress.each_replica()
        return JSONResponse(ingress.readiness(), 200 if ingress.ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        replicas = await ingress.each_replica()
        body = merge(ingress.metrics.render(), [(r["replica"], r["metrics"]) for r in replicas])
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1")
    async def info() -> dict[str, Any]:
        return ingress.info()

    @app.put("/v1/admin/settings")
    async def change_settings(request: Request) -> dict[str, Any]:
        """``--live-settings``: the change on every replica (all or none on each)."""
        changes = parse_json(await read_body(request, JSON_LIMIT), "settings")
        return {"replicas": await ingress.change_settings(changes)}


def _add_sessions(app: FastAPI, ingress: Ingress) -> None:
    settings = ingress.settings

    @app.post("/v1/sessions", status_code=201)
    async def create_session(request: Request) -> JSONResponse:
        body = await read_body(request, JSON_LIMIT)
        data = parse_json(body, "session options") if body.strip() else {}
        described = await ingress.open(SessionOptions.from_json(data))
        return JSONResponse(described, 201, headers={"Location": f"/v1/sessions/{described['id']}"})

    @app.get("/v1/sessions")
    async def list_sessions() -> dict[str, Any]:
        ingress.require_ready()
        remote = {s["id"]: s for r in await ingress.each_replica() for s in r["sessions"]}
        return {"sessions": [s.describe(remote.get(s.id)) for s in ingress.sessions.values()]}

    @app.get("/v1/sessions/{sid}")
    async def get_session(sid: str) -> dict[str, Any]:
        session = ingress.session(sid)
        return session.describe(await ingress.call(sid, "describe", sid))

    @app.post("/v1/sessions/{sid}/frames")
    async def post_frames(sid: str, request: Request, frame: int | None = None,
                          t: float | None = None, width: int | None = None,
                          height: int | None = None) -> dict[str, Any]:
        refuse_attached(ingress.session(sid), sid)  # before its body is read, and again after
        body = await read_body(request, settings.max_body_bytes)
        parts = split_body(request.headers.get("content-type", ""), body, settings, width, height)
        async with held(sid, lambda: ingress.session(sid)) as session:
            return await ingress.push(session, parts, frame, t)

    @app.post("/v1/sessions/{sid}/finish")
    async def finish(sid: str) -> dict[str, Any]:
        async with held(sid, lambda: ingress.session(sid)) as session:
            try:
                reply = await ingress.result(ingress.send_finish(session, session.last_index + 1))
            except ApiError as exc:
                session.refused(exc)
                raise
            ingress.note(session, reply)
        ingress.forget(sid, "finished")
        return {"session": sid, "results": reply["results"], "frames": session.frames,
                "windows": session.windows_before + session.windows}

    @app.delete("/v1/sessions/{sid}")
    async def delete(sid: str) -> dict[str, Any]:
        refuse_busy(ingress.session(sid), sid)
        try:  # first: a replica whose own socket drives it (--direct-streams) refuses, 409
            await ingress.call(sid, "delete", sid)
        except ReplicaLost:
            pass  # nothing left to delete
        ingress.forget(sid, "deleted")
        return {"deleted": sid}


# -- /v1/track: a whole video on one replica ------------------------------------------------------
def _add_track(app: FastAPI, ingress: Ingress) -> None:
    @app.post("/v1/track")
    async def track(request: Request, step: int = 3, threshold: float | None = None,
                    dedup_ssim: float | None = None) -> StreamingResponse:
        ingress.require_ready()
        options = SessionOptions.from_json(
            {"step": step, "threshold": threshold, "dedup_ssim": dedup_ssim})
        key = f"{UPLOAD_PREFIX}{secrets.token_urlsafe(12)}"  # routes every piece to one replica
        await ingress.upload(key, video_suffix(request),
                             body_pieces(request, ingress.settings.max_video_bytes))
        lines = ingress.send(key, "track", key, options, stream=True)
        try:
            first = await ingress.result(lines.__anext__())
        except StopAsyncIteration:
            first = b""
        except BaseException:
            lines.cancel()
            ingress.drop_upload(key)  # if the replica never took it
            raise
        return StreamingResponse(_rest(first, lines, key), media_type="application/x-ndjson")


async def _rest(first: bytes, lines: Any, key: str) -> AsyncIterator[bytes]:
    """The replica's lines after the first; a replica that fails mid-video ends the stream with
    an error line (the single worker's last line on a failure) instead of a cut body, and a
    client gone stops the replica's work (its tracking went on to the video's end)."""
    try:
        yield first
        async for line in lines:
            yield line
    except Exception as exc:  # noqa: BLE001  (the client must hear why it ends here)
        error = replica_error(exc)
        if not isinstance(error, ApiError):
            error = ApiError(500, "replica_error", f"{type(exc).__name__}: {exc}")
        yield (json.dumps(error.body()) + "\n").encode()
    finally:
        lines.cancel()
        release(key)

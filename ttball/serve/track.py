"""``POST /v1/track``: a whole video in, NDJSON rows out as they finish (docs/serve.md); the
upload spooled to a temporary file (:func:`spool`; the Ray ingress sends :func:`body_pieces` on
to a replica) and tracked as one session (:func:`track_lines`, shared with the Ray replicas)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from ttball.errors import UserError
from ttball.pipeline import MIN_FRAMES
from ttball.serve.batcher import Overloaded
from ttball.serve.sessions import Feeder, Session, SessionOptions
from ttball.serve.settings import ApiError
from ttball.serve.worker import Worker

VIDEO_SUFFIXES = {"video/mp4": ".mp4", "video/quicktime": ".mov", "video/x-msvideo": ".avi",
                  "video/x-matroska": ".mkv", "video/webm": ".webm"}


def add_track(app: FastAPI, worker: Worker) -> None:
    @app.post("/v1/track")
    async def track(request: Request, step: int = 3, threshold: float | None = None,
                    dedup_ssim: float | None = None) -> StreamingResponse:
        store, feeder = worker.live()
        options = SessionOptions.from_json(
            {"step": step, "threshold": threshold, "dedup_ssim": dedup_ssim})
        path = await spool(request, worker.settings.max_video_bytes)
        source, frames = await open_video(path, worker.settings.max_frame_pixels)
        session = Session(f"track-{id(path)}", options,
                          store.new_stream(options, f"track-{id(path)}"), source.info.fps)
        lines = track_lines(source, frames, session, feeder, worker.settings.max_ws_inflight,
                            path)
        return StreamingResponse(lines, media_type="application/x-ndjson")


async def open_video(path: Path, max_pixels: int) -> tuple[Any, Iterator[Any]]:
    """The spooled video at ``path`` as a ``FrameSource`` and its frames, refused before any
    row is sent (a 4xx, not an error line after a 200): 400 ``bad_video`` (no video),
    413 ``frame_too_large`` (frames over ``max_pixels``, as ``/frames`` refuses them), 400
    ``video_too_short`` (fewer than 3 readable frames: its first 3 are read here). On a refusal
    the file is deleted."""
    from ttball.frames import FrameSource

    try:
        try:
            source = await asyncio.to_thread(FrameSource, path)
        except UserError as exc:
            raise ApiError(400, "bad_video", str(exc).replace(str(path), "the body")) from None
        width, height = source.info.width, source.info.height
        if width * height > max_pixels:
            raise ApiError(413, "frame_too_large", f"the video's frames are {width}x{height}, "
                           f"over the limit of {max_pixels} pixels")
        frames = iter(source)
        first = await asyncio.to_thread(lambda: list(itertools.islice(frames, MIN_FRAMES)))
        if len(first) < MIN_FRAMES:
            raise ApiError(400, "video_too_short", f"{len(first)} readable frame(s); at least "
                           f"{MIN_FRAMES} are needed")
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return source, itertools.chain(first, frames)


def video_suffix(request: Request) -> str:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return VIDEO_SUFFIXES.get(kind, ".mp4")


async def body_pieces(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The request body as it arrives; 413 past ``limit`` bytes (at once for a declared
    ``Content-Length`` over it), 400 for an empty one."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body_too_large", f"video of {declared} bytes over the limit of "
                       f"{limit} bytes")
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"video over the limit of {limit} bytes")
        if chunk:
            yield chunk
    if size == 0:
        raise ApiError(400, "empty_body", "POST the video file as the request body")


async def spool(request: Request, limit: int) -> Path:
    fd, name = tempfile.mkstemp(prefix="ttball-track-", suffix=video_suffix(request))
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            async for chunk in body_pieces(request, limit):
                f.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


async def track_lines(source: Any, frames: Iterator[Any], session: Session, feeder: Feeder,
                      inflight: int, path: Path) -> AsyncIterator[bytes]:
    """NDJSON of ``frames`` (from :func:`open_video`): one row per frame as it finishes, then
    ``{"summary": ...}`` (or ``{"error"}``); ``path`` deleted at the end."""
    started = time.perf_counter()
    steps: deque[asyncio.Task[None]] = deque()
    count = 0
    try:
        while (frame := await asyncio.to_thread(next, frames, None)) is not None:
            steps.append(await _push_waiting(feeder, session, frame))
            while steps and (len(steps) > inflight or steps[0].done()):
                await steps.popleft()
                for row in session.take_rows():
                    count += 1
                    yield _line(row)
        steps.append(await feeder.finish(session))
        for step in steps:
            await step
        for row in session.take_rows():
            count += 1
            yield _line(row)
        elapsed = time.perf_counter() - started
        yield _line({"summary": {"frames": count, "windows": session.stream.windows_out,
                                 "duplicates": session.stream.duplicates,
                                 "corrupt_frames": len(source.info.corrupt_frames),
                                 "seconds": round(elapsed, 3),
                                 "frames_per_s": round(count / elapsed, 2) if elapsed else 0.0}})
    except ApiError as exc:
        yield _line(exc.body())
    except asyncio.CancelledError:
        # the server's graceful shutdown ran out (uvicorn cancels what is still running): say
        # so as the last line, as for any other error, instead of a stream cut without one
        yield _line(ApiError(503, "shutting_down", f"the worker stopped after {count} rows; "
                             "send the video again").body())
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

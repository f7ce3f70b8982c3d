"""One replica of ``ttball serve --ray``: the single worker's engine behind Ray Serve calls.

Each replica builds what ``ttball serve`` builds (:class:`~ttball.serve.worker.Worker`: load,
backend, warm-up, optional verify; then the :class:`Batcher`, :class:`SessionStore` and
:class:`Feeder`) and finishes all of it in its constructor, so Ray Serve counts the replica
healthy, and routes to it, only once it is warm. ``check_health`` fails if the worker ever
leaves the ready phase. Windows of every session on the replica share its one batcher, exactly
as in the single worker.

The ingress calls these methods with the session id as the routing key
(:mod:`.serve_router` keeps a session on one replica). Calls of one session carry a sequence
number ``seq`` given by the ingress; a replica accepts them in that order even when Ray delivers
them out of order (the ingress pipelines a WebSocket's frames), and replies in that order too:
reply ``k`` holds the rows finished before reply ``k + 1``'s.

Resuming: a call for a session this replica does not hold (its replica died, the router moved
it here) opens it from the options the call carries, numbering frames on from the ingress's
count. The new session starts with an empty window and a fresh tracker; the reply says
``resumed``. What the old replica held is lost: the frames whose rows had not been returned yet.

Errors: an :class:`ApiError` a call raises (a refused frame, 429, 409, ...) pickles with all its
fields (``ApiError.__reduce__``), so the ingress answers the client as the single worker would.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ttball.distributed.serve_uploads import VideoUploads
from ttball.serve.metrics import Metrics
from ttball.serve.sessions import Feeder, Session, SessionOptions, SessionStore
from ttball.serve.settings import ApiError, ServeSettings
from ttball.serve.uploads import Part
from ttball.serve.websocket import refuse_attached
from ttball.serve.worker import Worker
from ttball.stream import Window

# A call waits this long for its predecessor (same session, seq - 1); one lost in transit is then
# skipped rather than stalling the session forever. Ten seconds is far longer than any call takes
# on a live replica (a CPU window is ~0.5 s, docs/serve.md) and short enough to recover.
TURN_TIMEOUT_S = 10.0
@dataclass
class _Order:
    """The call order of one session: whose turn it is and the previous call's reply."""

    next_seq: int
    turn: asyncio.Condition = field(default_factory=asyncio.Condition)
    replied: asyncio.Future[None] | None = None


class ReplicaWorker:
    """The Ray Serve deployment class of the worker replicas (wrapped in ``serve.py``)."""

    async def __init__(self, settings: ServeSettings) -> None:  # type: ignore[misc]  # Ray Serve awaits it
        self.metrics = Metrics()
        self._streams: Any = None  # --direct-streams: this replica's own uvicorn server
        self.stream_base: str | None = None
        self.worker = Worker(settings, self.metrics)
        self.id = _replica_id()
        self._order: dict[str, _Order] = {}
        self.uploads = VideoUploads(ttl_s=settings.session_ttl_s)
        self._life = self.worker.lifespan(None)
        await self._life.__aenter__()
        while not self.worker.ready:
            if self.worker.phase == "failed":
                await self._life.__aexit__(None, None, None)
                raise RuntimeError(f"ttball replica start-up failed: {self.worker.error}")
            await asyncio.sleep(0.05)
        if settings.direct_streams:
            self.stream_base = await self._serve_streams(settings)

    async def check_health(self) -> None:
        if not self.worker.ready:
            raise RuntimeError(f"the worker is {self.worker.phase}")

    async def __del__(self) -> None:
        if self._streams is not None:
            self._streams.should_exit = True
        if self.worker.phase != "stopping":
            await self._life.__aexit__(None, None, None)

    async def _serve_streams(self, settings: ServeSettings) -> str:
        """``--direct-streams``: the session WebSocket of this replica's worker on a free port
        of ``settings.host``, on this replica's event loop; returns its ``ws://`` base."""
        import uvicorn

        from ttball.serve.app import draining_server, stream_app, uvicorn_options

        config = uvicorn.Config(stream_app(self.worker), host=settings.host, port=0,
                                lifespan="off", log_level="warning", **uvicorn_options())
        self._streams = draining_server(config, self.worker)
        serving = asyncio.get_running_loop().create_task(self._streams.serve())
        while not self._streams.started:
            if serving.done():
                raise RuntimeError(f"ttball replica: its stream server did not start "
                                   f"({serving.exception()!r})")
            await asyncio.sleep(0.01)
        port = self._streams.servers[0].sockets[0].getsockname()[1]
        return f"ws://{_advertised(settings.host)}:{port}"

    @property
    def store(self) -> SessionStore:
        assert self.worker.store is not None
        return self.worker.store

    @property
    def feeder(self) -> Feeder:
        assert self.worker.feeder is not None
        return self.worker.feeder

    # -- sessions --------------------------------------------------------------------------------
    async def open(self, sid: str, options: SessionOptions) -> dict[str, Any]:
        session = self.store.create(options, sid)
        self._order[sid] = _Order(0)
        return self._described(session)

    async def push(self, sid: str, options: SessionOptions, seq: int, next_index: int,
                   parts: list[Part], frame: int | None = None,
                   t: float | None = None) -> dict[str, Any]:
        """Frames in (as ``POST /v1/sessions/{id}/frames`` takes them); the rows they finished."""
        session, order, resumed = self._session(sid, options, seq, next_index)
        rows = await self._in_turn(session, order, seq,
                                   lambda: self.feeder.push(session, parts, frame, t))
        return {"replica": self.id, "resumed": resumed, "accepted": len(parts),
                "last_frame": session.last_index, "results": rows,
                "pending_frames": session.stream.pending_frames,
                "windows": session.stream.windows_out}

    async def finish(self, sid: str, options: SessionOptions, seq: int,
                     next_index: int) -> dict[str, Any]:
        session, order, resumed = self._session(sid, options, seq, next_index)
        rows = await self._in_turn(session, order, seq, lambda: self.feeder.finish(session))
        self.store.remove(sid, "finished")
        self._order.pop(sid, None)
        return {"replica": self.id, "resumed": resumed, "results": rows,
                "windows": session.stream.windows_out}

    async def delete(self, sid: str) -> bool:
        try:
            session: Session | None = self.store.get(sid)
        except ApiError:  # (not here: nothing to delete)
            session = None
        if session is not None:  # its own socket (--direct-streams) drives it: 409
            refuse_attached(session, sid)
        self._order.pop(sid, None)
        return self.store.remove(sid, "deleted") is not None

    async def driven(self, sid: str) -> bool:
        """Whether a socket on this replica (``--direct-streams``) drives session ``sid``."""
        try:
            return self.store.get(sid).attached
        except ApiError:
            return False

    async def describe(self, sid: str) -> dict[str, Any] | None:
        try:
            return self._described(self.store.get(sid))
        except ApiError:
            return None

    def _described(self, session: Session) -> dict[str, Any]:
        described = {**session.describe(), "replica": self.id}
        if self.stream_base is not None:
            described["stream_url"] = f"{self.stream_base}/v1/sessions/{session.id}/stream"
        return described

    def _session(self, sid: str, options: SessionOptions, seq: int,
                 next_index: int) -> tuple[Session, _Order, bool]:
        self.worker.require_ready()
        try:
            session, resumed = self.store.get(sid), False
        except ApiError:
            held = {s.id for s in self.store.all()}
            for gone in [k for k in self._order if k not in held]:
                del self._order[gone]  # expired or removed (or held before a restart)
            session, resumed = self.store.create(options, sid), True
            session.last_index = next_index - 1
        # --direct-streams: a socket on this replica drives it; the ingress's push, finish or
        # socket would take frame numbers and rows from under it (the socket's client lost them)
        refuse_attached(session, sid)
        if sid not in self._order:
            self._order[sid] = _Order(seq)
        return session, self._order[sid], resumed

    async def _in_turn(self, session: Session, order: _Order, seq: int,
                       start: Callable[[], Awaitable[asyncio.Task[None]]]) -> list[dict[str, Any]]:
        """Run ``start`` (push or finish) in ``seq`` order, then wait for its step and take the
        rows in ``seq`` order. The turn passes on as soon as the frames are in the stream, so the
        next call's decode overlaps this one's network time."""
        await self._wait_turn(order, seq)
        previous, mine = order.replied, asyncio.get_running_loop().create_future()
        order.replied = mine
        try:
            try:
                step = await start()
            finally:
                order.next_seq = seq + 1
                async with order.turn:
                    order.turn.notify_all()
            await asyncio.shield(step)  # a caller gone mid-call leaves its rows in the outbox
            if previous is not None:
                await previous
            return session.take_rows()
        finally:
            _chain(previous, mine)

    @staticmethod
    async def _wait_turn(order: _Order, seq: int) -> None:
        if seq < order.next_seq:
            raise ApiError(409, "frames_lost",
                           f"call {seq} of this session arrived after call {order.next_seq - 1}; "
                           "its frames were dropped while the session moved to another replica")
        async with order.turn:
            try:
                await asyncio.wait_for(order.turn.wait_for(lambda: order.next_seq >= seq),
                                       TURN_TIMEOUT_S)
            except TimeoutError:
                order.next_seq = seq  # the calls before it were lost on the way: go on

    # -- /v2 infer and /v1/track -----------------------------------------------------------------
    async def infer(self, x: np.ndarray) -> np.ndarray:
        """Network input ``(B, 9, H, W)`` float32 → logits ``(B, 3, H, W)`` float32, batched."""
        self.worker.require_ready()
        batcher = self.worker.batcher
        assert batcher is not None
        batcher.reserve(len(x))
        futures = [batcher.submit(Window("oip", (0, 0, 0), row), raw=True) for row in x]
        try:
            return np.stack(await asyncio.gather(*futures)).astype("<f4", copy=False)
        except BaseException:
            for f in futures:
                f.cancel()
            raise

    async def upload(self, key: str, suffix: str, offset: int, data: bytes) -> int:
        """A piece of a /v1/track video (``serve_uploads``); the size held after it."""
        return await asyncio.to_thread(self.uploads.append, key, suffix, offset, data)

    async def discard(self, key: str) -> None:
        """The ingress gave up on upload ``key`` (its client left, a piece failed)."""
        self.uploads.discard(key)

    async def track(self, key: str, options: SessionOptions) -> AsyncIterator[bytes]:
        """Upload ``key``, a whole video → NDJSON lines, as ``POST /v1/track`` streams them."""
        from ttball.serve.track import open_video, track_lines

        path = self.uploads.take(key)
        try:
            self.worker.require_ready()
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        # (a refusal here reaches the ingress before its response starts: a 4xx there too)
        source, frames = await open_video(path, self.worker.settings.max_frame_pixels)
        sid = f"track-{path.stem}"
        session = Session(sid, options, self.store.new_stream(options, sid), source.info.fps)
        async for line in track_lines(source, frames, session, self.feeder,
                                       self.worker.settings.max_ws_inflight, path):
            yield line

    # -- what the ingress gathers from every replica --------------------------------------------
    async def change_settings(self, changes: Any) -> dict[str, Any]:
        """``--live-settings``: this replica's worker applies ``changes``."""
        return {"replica": self.id, "settings": self.worker.change_settings(changes)}

    async def status(self) -> dict[str, Any]:
        """Readiness, sessions and the Prometheus text of this replica (asked every 2 s: the
        uploads no piece reached for the TTL, their ingress gone, are deleted here too)."""
        self.uploads.sweep()
        if self.worker.batcher is not None:
            self.metrics.queue_depth.set(self.worker.batcher.depth)
        return {"replica": self.id, "readiness": self.worker.readiness(),
                "info": self.worker.info(),
                "sessions": [self._described(s) for s in self.store.all()]
                if self.worker.store is not None else [],
                "uploads": len(self.uploads),  # /v1/track videos arriving
                "metrics": self.metrics.render().decode()}


def _chain(previous: asyncio.Future[None] | None, mine: asyncio.Future[None]) -> None:
    """Resolve ``mine`` once ``previous`` is resolved (reply order survives a failed call)."""
    def done(_: object = None) -> None:
        if not mine.done():
            mine.set_result(None)

    if previous is None or previous.done():
        done()
    else:
        previous.add_done_callback(done)


def _advertised(host: str) -> str:
    """The address clients reach a replica's own port at: ``host``, or this node's IP when
    ``host`` is a wildcard."""
    if host not in ("0.0.0.0", "::", ""):
        return f"[{host}]" if ":" in host else host
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except (ImportError, RuntimeError):
        return "127.0.0.1"


def _replica_id() -> str:
    try:
        from ray import serve

        return str(serve.get_replica_context().replica_id.unique_id)
    except (ImportError, RuntimeError, AttributeError):
        return f"pid-{os.getpid()}"

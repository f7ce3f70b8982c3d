"""The HTTP side of ``ttball serve --ray``: the single worker's API in front of the replicas.

One ingress replica (a FastAPI ``@serve.ingress`` deployment) answers every route of
``ttball serve`` (docs/serve.md: sessions, WebSocket, ``/v1/track``, KServe v2, ``/metrics``,
health) and sends the work to the worker replicas (:mod:`.serve_replica`) through a deployment
handle whose router keeps a session on its replica (:mod:`.serve_router`). It keeps, per session,
the options and counters it needs to resume the session elsewhere; frames are checked here
(sizes, content types) and decoded on the replica.

Its routes are in :mod:`.serve_routes`, the WebSocket route in :mod:`.serve_stream`. When a
session's replica dies: a ``POST .../frames`` is sent to the replica that takes the session
over (at once, then after 0.5 and 2 s while none does), and its answer carries ``"moved":
{"replica", "lost_frames"}``; on a WebSocket, each frame whose call failed gets ``{"type":
"error", "frame": N, "error": {"code": "replica_lost"}}`` and the next frames go on on the new
replica. Lost are the frames whose rows had not come back (``lost_frames``, at most the frames
in flight) and the tracker's memory; the new replica starts a new window with the next frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
from fastapi import FastAPI

from ttball import __version__
from ttball.distributed.serve_metrics import IngressMetrics
from ttball.distributed.serve_router import RANK_PREFIX, release
from ttball.distributed.serve_uploads import UPLOAD_CHUNK_BYTES
from ttball.serve.sessions import SessionOptions, clip
from ttball.serve.settings import ApiError, ServeSettings
from ttball.serve.uploads import Part

POLL_S = 2.0  # replica status round: readiness, replica count, session expiry
CALL_TIMEOUT_S = 5.0  # a status call; a replica slower than this is counted as absent
RETRY_DELAYS_S = (0.0, 0.5, 2.0)  # a POST's frames, sent again after its replica died
# what /readyz lists of each replica's own readiness, beside its phase, device and sessions (its
# warm-up says which sizes it tuned and which it took from another's tuning record)
REPLICA_KEYS = ("gpu", "switch_interval_ms", "live_settings", "event_loop", "warmup",
                "startup_seconds")


class ReplicaLost(ApiError):
    def __init__(self, detail: str) -> None:
        super().__init__(503, "replica_lost", f"the session's replica died ({detail}); the "
                         "session goes on from the next window on another replica",
                         {"Retry-After": "1"})


def replica_error(exc: BaseException) -> BaseException:
    """What a replica call raised, as the client should hear it: a replica's :class:`ApiError`
    as itself, its other failures as a 500 ``replica_error``, a dead replica as
    :class:`ReplicaLost`; anything that is not Ray's, unchanged."""
    import ray.exceptions as rx
    from ray.serve.exceptions import RequestCancelledError

    if isinstance(exc, rx.RayTaskError):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, ApiError):
            return ApiError(cause.status, cause.code, cause.message, cause.headers)
        return ApiError(500, "replica_error", _last_line(exc))
    if isinstance(exc, (rx.RayActorError, RequestCancelledError)):
        return ReplicaLost(type(exc).__name__)
    return exc


class TimedCall:
    """A replica call's response; awaiting it observes the call's time in ``histogram`` (from
    the call until the reply is in hand, also when the call fails)."""

    __slots__ = ("histogram", "response", "start")

    def __init__(self, response: Any, histogram: Any) -> None:
        self.response, self.histogram, self.start = response, histogram, time.perf_counter()

    def __await__(self) -> Any:
        try:
            return (yield from self.response.__await__())
        finally:
            self.histogram.observe(time.perf_counter() - self.start)


@dataclass
class RemoteSession:
    """What the ingress knows of a session; its stream lives on a replica."""

    id: str
    options: SessionOptions
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_seen: float = field(default_factory=time.monotonic)
    attached: bool = False
    seq: int = 0  # the next call's sequence number
    last_index: int = -1  # the last frame number a replica took
    answered: int = -1  # the last frame whose row went back
    frames: int = 0  # frames taken, over every replica it lived on
    windows_before: int = 0  # windows run on replicas it left
    windows: int = 0  # windows run on its current replica
    replica: str | None = None
    moves: int = 0
    unseen_rounds: int = 0  # --direct-streams: status rounds in which no replica held it

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq - 1

    def refused(self, exc: ApiError) -> None:
        """A call of this session's (the only one in flight: an HTTP request under its lock)
        came back ``session_busy``: its replica's socket drives it, and the replica refused
        before the call took its turn, so the next call takes this one's number (a gap would
        leave it waiting for a turn that never comes)."""
        if exc.code == "session_busy":
            self.seq -= 1

    def describe(self, remote: dict[str, Any] | None) -> dict[str, Any]:
        o = self.options
        base = remote or {"id": self.id, "step": o.step, "threshold": o.threshold,
                          "dedup_ssim": o.dedup_ssim, "width": o.width, "height": o.height,
                          "fps": o.fps, "duplicates": 0, "pending_frames": 0}
        windows = self.windows_before + (remote or {}).get("windows", self.windows)
        return {**base, "frames": self.frames, "windows": windows, "replica": self.replica,
                "moves": self.moves, "idle_s": round(time.monotonic() - self.last_seen, 3)}


class Ingress:
    """The ingress deployment's class. It also stands in for the single worker's ``Worker``
    where ``ttball.serve.oip`` expects one (``ready``, ``config``, ``batcher``, ...)."""

    def __init__(self, workers: Any, settings: ServeSettings, max_replicas: int,
                 upload_chunk_bytes: int = UPLOAD_CHUNK_BYTES) -> None:
        self.workers, self.settings, self.max_replicas = workers, settings, max_replicas
        self.upload_chunk_bytes = upload_chunk_bytes
        self.metrics = IngressMetrics()
        self.sessions: dict[str, RemoteSession] = {}
        self.replicas: list[dict[str, Any]] = []  # the last status round
        self.config: Any = None
        self.backend: Any = None
        self.error: str | None = None
        self.batcher = _RemoteBatcher(self)
        self._poller: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    def __serve_build_asgi_app__(self) -> FastAPI:
        from ttball.distributed.serve_routes import build_app

        return build_app(self)

    @asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        self._poller = asyncio.get_running_loop().create_task(self._poll_forever())
        try:
            yield
        finally:
            self._poller.cancel()

    # -- calls to the replicas --------------------------------------------------------------------
    def send(self, key: str | None, method: str, *args: Any, stream: bool = False) -> Any:
        """Start ``method`` on the replica of routing key ``key`` (None: the least busy one);
        await it with :meth:`result`."""
        handle = self.workers.options(method_name=method, stream=stream)
        if key is not None:
            handle = handle.options(session_id=key)
        # A call made while serving a request inherits that request's internal id, and Ray's
        # router matches replicas to waiting calls by that id: the frames of one WebSocket,
        # all in flight at once, would be confused (some never routed). Each call is made in
        # an empty context, so it gets an id of its own.
        response = contextvars.Context().run(handle.remote, *args)
        if stream:
            return response
        return TimedCall(response, self.metrics.call_seconds.labels(method))

    @staticmethod
    async def result(response: Any) -> Any:
        """The reply; a replica's :class:`ApiError` as itself, a dead replica as ReplicaLost."""
        try:
            return await response
        except Exception as exc:  # noqa: BLE001  (what is not Ray's is raised as it is)
            raise replica_error(exc) from None

    async def call(self, key: str | None, method: str, *args: Any) -> Any:
        return await self.result(self.send(key, method, *args))

    async def upload(self, key: str, suffix: str, pieces: AsyncIterator[bytes]) -> int:
        """Send a /v1/track body on to the replica of routing key ``key`` as it arrives, in
        calls of ``upload_chunk_bytes`` (``serve_uploads``): the ingress holds one piece, not the
        video. On any failure (the client gone, a piece refused) that replica drops the file."""
        buf, sent = bytearray(), 0
        try:
            async for piece in pieces:
                buf += piece
                while len(buf) >= self.upload_chunk_bytes:
                    part = bytes(buf[:self.upload_chunk_bytes])
                    del buf[:self.upload_chunk_bytes]
                    sent = await self.call(key, "upload", key, suffix, sent, part)
            if buf:
                sent = await self.call(key, "upload", key, suffix, sent, bytes(buf))
        except ReplicaLost:
            self.drop_upload(key)
            raise ApiError(503, "upload_lost", "the replica taking the video died; send the "
                           "video again", {"Retry-After": "1"}) from None
        except BaseException:
            self.drop_upload(key)
            raise
        return sent

    def drop_upload(self, key: str) -> None:
        """Ask the replica of ``key`` to delete its file (no wait), then stop routing ``key``."""
        async def quietly() -> None:
            with contextlib.suppress(Exception):  # a replica gone took the file with it
                await self.call(key, "discard", key)
            release(key)

        task = asyncio.get_running_loop().create_task(quietly())
        self._background.add(task)  # the loop keeps only a weak reference
        task.add_done_callback(self._background.discard)

    async def each_replica(self) -> list[dict[str, Any]]:
        """Every replica's ``status()`` (ranks 0..max_replicas-1 cover them all)."""
        async def one(rank: int) -> Any:
            return await asyncio.wait_for(self.call(f"{RANK_PREFIX}{rank}", "status"),
                                          CALL_TIMEOUT_S)

        found: dict[str, dict[str, Any]] = {}
        for r in await asyncio.gather(*(one(k) for k in range(self.max_replicas)),
                                      return_exceptions=True):
            if isinstance(r, dict):
                found.setdefault(r["replica"], r)
        self.replicas = [found[k] for k in sorted(found)]
        self.metrics.replicas.set(len(self.replicas))
        if self.replicas and self.config is None:
            info = self.replicas[0]["info"]
            self.config = SimpleNamespace(input_size=tuple(info["input_size"]),
                                          name=info["weights"],
                                          score_threshold=info["score_threshold"])
            self.backend = SimpleNamespace(name=info["backend"], device=info["device"])
        return self.replicas

    async def change_settings(self, changes: Any) -> dict[str, dict[str, Any]]:
        """``--live-settings``: ``changes`` applied by every replica (ranks 0..max_replicas-1
        reach them all, some twice: a change is the same applied again); each replica's
        values by its id. The first refusal (404, 422) is raised as it is; a replica that does
        not answer is one the change did not reach (504)."""
        async def one(rank: int) -> Any:
            return await asyncio.wait_for(
                self.call(f"{RANK_PREFIX}{rank}", "change_settings", changes), CALL_TIMEOUT_S)

        values: dict[str, dict[str, Any]] = {}
        for reply in await asyncio.gather(*(one(k) for k in range(self.max_replicas)),
                                          return_exceptions=True):
            if isinstance(reply, ApiError):
                raise reply
            if isinstance(reply, BaseException):
                raise ApiError(504, "replica_timeout", f"a replica did not take the change: "
                                                       f"{_last_line(reply)}")
            values[reply["replica"]] = reply["settings"]
        return dict(sorted(values.items()))

    async def _poll_forever(self) -> None:
        while True:
            try:
                asked = time.monotonic()  # a session created after this is not in the round
                await self.each_replica()
                if self.settings.direct_streams:
                    self._follow_direct_streams(asked)
            except Exception as exc:  # noqa: BLE001  (the next round tries again)
                self.error = f"{type(exc).__name__}: {exc}"
            self._expire()
            await asyncio.sleep(POLL_S)

    def _follow_direct_streams(self, now: float) -> None:
        """``--direct-streams``: frames of a stream served by its replica never pass here, so
        the status round (asked at ``now``) stands in for them. A session a replica holds was
        seen when that replica last saw it, so it does not expire while it streams. One the
        ingress never carried a call of (``seq == 0``) that no replica has held for two rounds
        ended there (finished, closed, or its replica died: a direct stream ends with its
        replica) and is forgotten; two rounds, so one status call lost is not taken for it."""
        held = {s["id"]: s for r in self.replicas for s in r["sessions"]}
        for session in list(self.sessions.values()):
            remote = held.get(session.id)
            if remote is not None:
                session.unseen_rounds = 0
                session.last_seen = max(session.last_seen, now - float(remote["idle_s"]))
                session.frames = max(session.frames, int(remote["frames"]))
            elif session.seq == 0 and session.last_seen < now and not session.attached:
                session.unseen_rounds += 1
                if session.unseen_rounds >= 2:
                    self.forget(session.id, "ended")

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.settings.session_ttl_s
        for s in [s for s in self.sessions.values()
                  if s.last_seen < cutoff and not s.attached and not s.lock.locked()]:
            self.forget(s.id, "expired")  # its replica expires it on the same clock

    def forget(self, sid: str, event: str) -> RemoteSession | None:
        session = self.sessions.pop(sid, None)
        release(sid)  # the router's count of its replica, too
        if session is not None:
            self.metrics.session_events.labels(event).inc()
            self.metrics.sessions.set(len(self.sessions))
        return session

    # -- what ttball.serve.oip and the health routes ask --------------------------------------
    @property
    def ready(self) -> bool:
        return any(r["readiness"]["ready"] for r in self.replicas)

    @property
    def phase(self) -> str:
        return "ready" if self.ready else "starting"

    def readiness(self) -> dict[str, Any]:
        ready = [r for r in self.replicas if r["readiness"]["ready"]]
        first = ready[0]["readiness"] if ready else {}
        keys = ("backend", "device", "weights", "warmup", "verified", "device_pipeline",
                "startup_seconds")
        return {"ready": bool(ready), "phase": self.phase, "error": None if ready else self.error,
                **{k: first.get(k) for k in keys},
                "replicas": [{"replica": r["replica"], "phase": r["readiness"]["phase"],
                              "device": r["readiness"]["device"],
                              **{k: r["readiness"].get(k) for k in REPLICA_KEYS},
                              # its decode children's start (--decode-processes)
                              "decoder_start": (r["readiness"].get("device_pipeline")
                                                or {}).get("decoder_start"),
                              "sessions": len(r["sessions"]),
                              "uploads": r.get("uploads", 0)} for r in self.replicas]}

    def require_ready(self) -> None:
        if not self.ready:
            raise ApiError(503, "not_ready", "no worker replica is ready yet", {"Retry-After": "1"})

    def info(self) -> dict[str, Any]:
        s = self.settings
        return {"name": "ttball", "version": __version__, **self.readiness(),
                "input_size": list(self.config.input_size) if self.config else None,
                "score_threshold": getattr(self.config, "score_threshold", None),
                "max_batch": s.batch_limit, "max_delay_ms": s.max_delay_ms,
                "max_queue": s.max_queue, "max_sessions": s.max_sessions,
                "session_ttl_s": s.session_ttl_s, "sessions": len(self.sessions),
                "ray": {"replicas": len(self.replicas), "max_replicas": self.max_replicas}}

    # -- sessions ---------------------------------------------------------------------------------
    def session(self, sid: str) -> RemoteSession:
        self.require_ready()
        try:
            return self.sessions[sid]
        except KeyError:
            raise ApiError(404, "unknown_session", f"no session {clip(sid)!r} (expired or deleted?)") from None

    async def open(self, options: SessionOptions) -> dict[str, Any]:
        self.require_ready()
        limit = self.settings.max_sessions * self.max_replicas
        if len(self.sessions) >= limit:
            raise ApiError(429, "too_many_sessions", f"{limit} sessions open (the limit)",
                           {"Retry-After": str(max(1, round(self.settings.session_ttl_s / 4)))})
        sid = secrets.token_urlsafe(12)
        try:
            described = await self.call(sid, "open", sid, options)
        except BaseException:
            release(sid)  # refused (a full replica's 429) or lost: not a session of the replica
            raise
        session = self.sessions[sid] = RemoteSession(sid, options, replica=described["replica"])
        self.metrics.session_events.labels("created").inc()
        self.metrics.sessions.set(len(self.sessions))
        return session.describe(described)

    def send_push(self, session: RemoteSession, parts: list[Part], frame: int | None = None,
                  t: float | None = None) -> Any:
        session.last_seen = time.monotonic()
        first = session.last_index + 1 if frame is None else frame
        return self.send(session.id, "push", session.id, session.options, session.next_seq(),
                         first, parts, frame, t)

    def send_finish(self, session: RemoteSession, next_index: int) -> Any:
        return self.send(session.id, "finish", session.id, session.options, session.next_seq(),
                         next_index)

    def note(self, session: RemoteSession, reply: dict[str, Any]) -> dict[str, Any] | None:
        """Book a replica's reply; returns ``{"replica", "lost_frames"}`` if the session moved."""
        moved = None
        if reply["resumed"]:
            lost = [session.answered + 1, session.last_index]
            moved = {"replica": reply["replica"],
                     "lost_frames": lost if lost[1] >= lost[0] else None}
            session.moves += 1
            session.windows_before += session.windows
            self.metrics.session_moves.inc()
            self.metrics.frames_lost.inc(max(0, lost[1] - lost[0] + 1))
        session.replica, session.windows = reply["replica"], reply["windows"]
        session.frames += reply.get("accepted", 0)
        session.last_index = max(session.last_index, reply.get("last_frame", -1))
        if reply["results"]:
            session.answered = reply["results"][-1]["frame"]
        return moved

    async def push(self, session: RemoteSession, parts: list[Part], frame: int | None,
                   t: float | None) -> dict[str, Any]:
        """``POST .../frames``; sent again (after a pause) while the session's replica is lost."""
        for delay in RETRY_DELAYS_S:
            await asyncio.sleep(delay)
            try:
                reply = await self.result(self.send_push(session, parts, frame, t))
                break
            except ReplicaLost as exc:
                lost = exc
            except ApiError as exc:
                session.refused(exc)
                raise
        else:
            raise lost
        moved = self.note(session, reply)
        out = {"session": session.id, "accepted": reply["accepted"],
               "last_frame": session.last_index, "results": reply["results"],
               "pending_frames": reply["pending_frames"]}
        return {**out, "moved": moved} if moved else out


class _RemoteBatcher:
    """``oip``'s view of the batcher: rows submitted in one go become one ``infer`` call to a
    replica, whose own batcher batches them with everything else it runs."""

    def __init__(self, ingress: Ingress) -> None:
        self.ingress = ingress
        self._rows: list[np.ndarray] = []
        self._futures: list[asyncio.Future[np.ndarray]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def reserve(self, n: int) -> None:
        """Admission is each replica's (its 429 comes back through the call)."""

    def submit(self, window: Any, raw: bool = False) -> asyncio.Future[np.ndarray]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[np.ndarray] = loop.create_future()
        self._rows.append(window.pixels)
        self._futures.append(future)
        if len(self._rows) == 1:
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        rows, futures = np.stack(self._rows), self._futures
        self._rows, self._futures = [], []
        task = asyncio.get_running_loop().create_task(self._send(rows, futures))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, rows: np.ndarray, futures: list[asyncio.Future[np.ndarray]]) -> None:
        try:
            out = await self.ingress.call(None, "infer", rows)
        except Exception as exc:  # noqa: BLE001  (every waiting request hears about it)
            for f in futures:
                if not f.done():
                    f.set_exception(exc)
            return
        for f, row in zip(futures, out):
            if not f.done():
                f.set_result(row)


def _last_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[-1] if lines else type(exc).__name__

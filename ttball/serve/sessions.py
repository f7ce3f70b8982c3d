"""Match sessions: request bodies → decoded frames → one :class:`FrameStream` per session.

A session is exactly the state ``ttball track`` keeps for a video (duplicate filter, windows,
tracker), so the same frames give the same rows. Frames are decoded and windowed in a thread
pool, windows run in the shared :class:`Batcher`, and each window's heatmaps come back to the
stream in window order: every push of frames creates a *step* that waits for the previous
step, so completion order never depends on which batch finished first. Finished rows go to the
session's outbox in frame order; a response (or a WebSocket send) takes what is there.

Frame bodies and their decoding: :mod:`ttball.serve.uploads`.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ttball.frames import Frame
from ttball.kernels.prepost import DeviceStream
from ttball.model.config import WeightsConfig
from ttball.results import FrameResult
from ttball.serve.batcher import Batcher
from ttball.serve.metrics import Metrics
from ttball.serve.settings import ApiError, ServeSettings
from ttball.serve.uploads import Part, decode, header_size
from ttball.stream import FrameStream, StreamOptions, Window

if TYPE_CHECKING:
    from ttball.serve.device import DeviceFeeder, DeviceLanes

T = TypeVar("T")
MAX_FRAME = 2**53 - 1  # frame numbers: exact as JSON numbers and float times
# a session's frame rate: a frame's time (index / fps) stays finite below MAX_FRAME
MIN_FPS, MAX_FPS = 1e-3, 10_000.0
MAX_SIDE = 1 << 15  # a session's declared frame width and height, pixels


# -- one session ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SessionOptions:
    """What a client may set when it opens a session (JSON body of ``POST /v1/sessions``)."""

    step: int = 3
    threshold: float | None = None
    dedup_ssim: float | None = None
    width: int | None = None
    height: int | None = None
    fps: float | None = None

    @classmethod
    def from_json(cls, data: Any) -> SessionOptions:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ApiError(422, "bad_options", "session options must be a JSON object")
        unknown = set(data) - {"step", "threshold", "dedup", "dedup_ssim", "width", "height", "fps"}
        if unknown:
            raise ApiError(422, "bad_options", f"unknown session options: {', '.join(sorted(unknown))}")
        dedup = data.get("dedup_ssim", data.get("dedup"))
        try:
            options = cls(
                step=_integer("step", data.get("step", 3)),
                threshold=_opt("threshold", float, data.get("threshold")),
                # false or 0: off; anything else goes through _opt ([] and {} are refused)
                dedup_ssim=0.99 if dedup is True else _opt(
                    "dedup", float, None if dedup in (False, 0) else dedup),
                width=_opt("width", partial(_integer, "width"), data.get("width")),
                height=_opt("height", partial(_integer, "height"), data.get("height")),
                fps=_opt("fps", float, data.get("fps")),
            )
            options.stream_options()
        except (TypeError, ValueError, OverflowError) as exc:
            raise ApiError(422, "bad_options", str(exc)) from None
        if (options.width is None) != (options.height is None):
            raise ApiError(422, "bad_options", "give both width and height, or neither")
        if options.width is not None and not (0 < options.width <= MAX_SIDE
                                              and 0 < (options.height or 0) <= MAX_SIDE):
            raise ApiError(422, "bad_options",
                           f"width and height must be in [1, {MAX_SIDE}], got "
                           f"{clip(options.width)}x{clip(options.height)}")
        if options.fps is not None and not MIN_FPS <= options.fps < MAX_FPS:
            raise ApiError(422, "bad_options",
                           f"fps must be in [{MIN_FPS:g}, {MAX_FPS:g}), got {options.fps:g}")
        return options

    def stream_options(self) -> StreamOptions:
        return StreamOptions(step=self.step, threshold=self.threshold, dedup_ssim=self.dedup_ssim)


def _opt(name: str, kind: Callable[[Any], T], value: Any) -> T | None:
    """Option ``name``'s JSON number ``value`` as ``kind`` (None stays None), else
    TypeError/ValueError naming the option."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {clip(repr(value))}")
    result = kind(value)
    if isinstance(result, float) and not math.isfinite(result):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return result


def _integer(name: str, value: Any) -> int:
    """A JSON number that is a whole number (``3`` or ``3.0``), else TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be an integer, got {clip(repr(value))}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name} must be an integer, got {value}")
    return int(value)


def clip(value: object, limit: int = 40) -> str:
    """``value`` for an error message, at most ``limit`` characters."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


@dataclass
class Session:
    """One match: its :class:`FrameStream`, the order of its steps and its finished rows."""

    id: str
    options: SessionOptions
    stream: FrameStream
    fps: float
    created: float = field(default_factory=time.monotonic)
    last_seen: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one request/socket at a time
    mutex: threading.Lock = field(default_factory=threading.Lock)  # the stream, across threads
    last_index: int = -1
    attached: bool = False  # a WebSocket drives it
    finished: bool = False
    failed: str | None = None
    tail: asyncio.Task[None] | None = None  # the newest step
    outbox: list[FrameResult] = field(default_factory=list)

    def touch(self) -> None:
        self.last_seen = time.monotonic()

    def check_usable(self) -> None:
        if self.failed:
            raise ApiError(409, "session_failed", f"session {self.id} failed earlier: {self.failed}")
        if self.finished:
            raise ApiError(409, "session_finished", f"session {self.id} is finished")

    @property
    def on_device(self) -> bool:
        """Its frames go through the device pipeline (``--device-pipeline``)."""
        return isinstance(self.stream, DeviceStream)

    def stamps(self, sizes: list[tuple[int, int]], frame: int | None,
               t: float | None) -> list[tuple[int, float]]:
        """Index and time of frames of ``sizes`` (width, height) that would join this stream
        now; 409/422 if they can't."""
        if frame is not None and not 0 <= frame <= MAX_FRAME:
            raise ApiError(400, "bad_frame_number",
                           f"frame must be an integer in [0, {MAX_FRAME}], got {clip(frame)}")
        if t is not None and not math.isfinite(t):
            raise ApiError(400, "bad_time", f"t must be a finite number of seconds, got {t}")
        first = self.last_index + 1 if frame is None else frame
        if first <= self.last_index:
            raise ApiError(409, "frame_order",
                           f"frame {first} is not after frame {self.last_index}, the last received")
        if first + len(sizes) - 1 > MAX_FRAME:  # numbered on past the last exact number
            raise ApiError(400, "bad_frame_number",
                           f"these frames would be numbered past {MAX_FRAME}, the last frame "
                           "number; open a new session")
        expected = self._expected_size()
        stamps = []
        for k, (w, h) in enumerate(sizes):
            if expected is None:
                expected = (w, h)
            if (w, h) != expected:
                raise ApiError(422, "frame_size",
                               f"frame is {w}x{h}; this session's frames are {expected[0]}x{expected[1]}")
            index = first + k
            stamps.append((index, (t + k / self.fps) if t is not None else index / self.fps))
        return stamps

    def number(self, rgbs: list[np.ndarray], frame: int | None, t: float | None) -> list[Frame]:
        """Give decoded frames their index and time; 409/422 if they can't join this stream."""
        stamps = self.stamps([(rgb.shape[1], rgb.shape[0]) for rgb in rgbs], frame, t)
        return [Frame(index, time_s, rgb) for (index, time_s), rgb in zip(stamps, rgbs)]

    def _expected_size(self) -> tuple[int, int] | None:
        g = self.stream.geometry
        if g is not None:
            return g.source_width, g.source_height
        if self.options.width is not None and self.options.height is not None:
            return self.options.width, self.options.height
        return None

    def push(self, frames: list[Frame]) -> list[Window]:
        """Thread pool: add frames; rows they make final go to the outbox."""
        windows: list[Window] = []
        with self.mutex:
            for frame in frames:
                windows.extend(self.stream.push(frame))
                self.last_index = frame.index
            # Rows a new frame made final (a duplicate of a frame whose row has left).
            # Below three kept frames nothing can be final, and FrameStream._emit's pixel
            # release would slice from the end, so don't ask.
            if self.stream.frames_in - self.stream.duplicates >= 3:
                self.outbox.extend(self.stream.drain())
        return windows

    def finish(self) -> list[Window]:
        """Thread pool: no more frames; the windows that cover the last ones."""
        with self.mutex:
            self.finished = True
            windows = self.stream.finish()
            self.outbox.extend(self.stream.drain())
        return windows

    def complete(self, window: Window, probs: np.ndarray) -> None:
        """Thread pool: a window's probabilities ``(3, h, w)`` back; finished rows to the outbox."""
        with self.mutex:
            self.outbox.extend(self.stream.complete(window, probs))

    def deliver(self, rows: list[FrameResult]) -> None:
        """Any thread: finished rows to the outbox (the device pipeline's results)."""
        with self.mutex:
            self.outbox.extend(rows)

    def take(self) -> list[FrameResult]:
        with self.mutex:
            rows, self.outbox = self.outbox, []
        return rows

    def take_rows(self) -> list[dict[str, Any]]:
        """:meth:`take` as the JSON rows the routes send."""
        return [r.as_dict() for r in self.take()]

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "step": self.options.step,
            "threshold": self.stream.threshold,
            "dedup_ssim": self.options.dedup_ssim,
            "width": size[0] if (size := self._expected_size()) else None,
            "height": size[1] if size else None,
            "fps": self.fps,
            "frames": self.stream.frames_in,
            "windows": self.stream.windows_out,
            "duplicates": self.stream.duplicates,
            "pending_frames": self.stream.pending_frames,
            "idle_s": round(time.monotonic() - self.last_seen, 3),
        }


# -- frames through the batcher ----------------------------------------------------------------
class Feeder:
    """Runs frames of a session through decode → stream → batcher → stream, keeping order.

    Sessions on the device pipeline are handed to ``device`` (:class:`~.device.DeviceFeeder`)."""

    def __init__(self, batcher: Batcher, pool: Executor, settings: ServeSettings,
                 metrics: Metrics, device: DeviceFeeder | None = None) -> None:
        self.batcher, self.pool, self.settings, self.metrics = batcher, pool, settings, metrics
        self.device = device

    async def _in_pool(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def push(self, session: Session, parts: list[Part], frame: int | None = None,
                   t: float | None = None) -> asyncio.Task[None]:
        """Decode and push ``parts``; returns the step that completes their windows.

        Nothing is pushed unless every part decodes and fits (a bad frame never half-enters a
        stream). Room for the windows the frames can complete is reserved first (429 when the
        queue is full, 413 when they would not fit an empty one).
        """
        if session.on_device:
            assert self.device is not None
            return self.device.push(session, parts, frame, t)
        return await self._push(session, len(parts), self._decode_and_push, session, parts,
                                frame, t)

    async def push_frames(self, session: Session, frames: list[Frame]) -> asyncio.Task[None]:
        """Push frames decoded already (``/v1/track``); returns their step."""
        return await self._push(session, len(frames), self._timed_push, session, frames)

    async def _push(self, session: Session, n: int, fn: Callable[..., list[Window]],
                    *args: Any) -> asyncio.Task[None]:
        session.check_usable()
        session.touch()
        # the most windows n frames complete: each at step 1, every third at step 3 (whatever
        # the stream holds already; duplicates complete none)
        most = n if session.options.step == 1 else -(-n // 3)
        self.batcher.reserve(most)
        windows: list[Window] = []
        try:
            windows = await self._in_pool(fn, *args)
        finally:
            self.batcher.release(most - len(windows))
        self.metrics.frame_accepted(n)
        return self._step(session, windows)

    def _decode_and_push(self, session: Session, parts: list[Part], frame: int | None,
                         t: float | None) -> list[Window]:
        start = time.perf_counter()
        # sizes from the headers first: a frame of the wrong size is refused before any is
        # decoded (eight 8K PNGs of 96 KB each took 6 s and 1.25 GB to refuse after decoding)
        session.stamps([p.raw_size or header_size(p, self.settings) for p in parts], frame, t)
        frames = session.number([decode(p, self.settings) for p in parts], frame, t)
        return self._timed_push(session, frames, start)

    def _timed_push(self, session: Session, frames: list[Frame],
                    start: float | None = None) -> list[Window]:
        start = time.perf_counter() if start is None else start
        windows = session.push(frames)
        per_frame = (time.perf_counter() - start) / max(len(frames), 1)
        for _ in frames:
            self.metrics.stage_seconds.labels("decode").observe(per_frame)
        return windows

    async def finish(self, session: Session) -> asyncio.Task[None]:
        """No more frames: run the trailing windows; the step leaves every row in the outbox."""
        if session.on_device:
            assert self.device is not None
            return self.device.finish(session)
        session.check_usable()
        self.batcher.reserve(1)
        windows: list[Window] = []
        try:
            windows = await self._in_pool(session.finish)
        finally:
            self.batcher.release(1 - len(windows))
        return self._step(session, windows)

    def _step(self, session: Session, windows: list[Window]) -> asyncio.Task[None]:
        futures = [self.batcher.submit(w) for w in windows]
        step = asyncio.get_running_loop().create_task(
            self._complete(session, session.tail, windows, futures))
        session.tail = step
        return step

    async def _complete(self, session: Session, previous: asyncio.Task[None] | None,
                        windows: list[Window], futures: list[asyncio.Future[np.ndarray]]) -> None:
        try:
            if previous is not None:
                await previous
            for window, future in zip(windows, futures):
                probs = await future
                await self._in_pool(self._post, session, window, probs)
        except asyncio.CancelledError:
            for future in futures:
                future.cancel()
            raise
        except ApiError as exc:
            session.failed = session.failed or exc.message
            raise

    def _post(self, session: Session, window: Window, probs: np.ndarray) -> None:
        start = time.perf_counter()
        session.complete(window, probs)
        self.metrics.stage_seconds.labels("post").observe(time.perf_counter() - start)


# -- the store -------------------------------------------------------------------------------------
class SessionStore:
    """Open sessions by id, bounded in number; idle ones expire after ``session_ttl_s``."""

    def __init__(self, config: WeightsConfig, settings: ServeSettings, metrics: Metrics,
                 device: DeviceLanes | None = None) -> None:
        """``device``: open sessions on it unless they need the host path (``dedup_ssim``)."""
        self.config, self.settings, self.metrics = config, settings, metrics
        self.device = device
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, options: SessionOptions, sid: str | None = None) -> Session:
        """A new session; ``sid`` (default: random) lets a router that picks ids place it."""
        if len(self._sessions) >= self.settings.max_sessions:
            raise ApiError(429, "too_many_sessions",
                           f"{len(self._sessions)} sessions open (the limit); close one or retry",
                           {"Retry-After": str(max(1, round(self.settings.session_ttl_s / 4)))})
        sid = sid or secrets.token_urlsafe(12)
        fps = options.fps or self.settings.fps
        if self.device is not None and options.dedup_ssim is None:
            stream: FrameStream = self.device.open(sid, options.stream_options(), fps)
        else:
            stream = self.new_stream(options, sid)
        session = Session(sid, options, stream, fps)
        self._sessions[sid] = session
        self._changed("created")
        return session

    def new_stream(self, options: SessionOptions, stream_id: str) -> FrameStream:
        return FrameStream(self.config, options.stream_options(), stream_id=stream_id)

    def get(self, sid: str) -> Session:
        try:
            return self._sessions[sid]
        except KeyError:
            raise ApiError(404, "unknown_session", f"no session {clip(sid)!r} (expired or deleted?)") from None

    def remove(self, sid: str, event: str) -> Session | None:
        session = self._sessions.pop(sid, None)
        if session is not None:
            if session.tail is not None and not session.tail.done():
                session.tail.cancel()
            if self.device is not None and session.on_device:
                self.device.close(session.stream.stream_id)
            self._changed(event)
        return session

    def _changed(self, event: str) -> None:
        self.metrics.session_events.labels(event).inc()
        self.metrics.sessions.set(len(self._sessions))

    def expire(self) -> list[str]:
        """Remove sessions idle longer than the TTL (not those busy or attached)."""
        cutoff = time.monotonic() - self.settings.session_ttl_s
        stale = [s.id for s in self._sessions.values()
                 if s.last_seen < cutoff and not s.attached and not s.lock.locked()]
        for sid in stale:
            self.remove(sid, "expired")
        return stale

    async def reap_forever(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        interval = min(max(self.settings.session_ttl_s / 4, 0.05), 5.0)
        while True:
            await sleep(interval)
            self.expire()

    def all(self) -> list[Session]:
        return list(self._sessions.values())

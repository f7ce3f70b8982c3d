"""JPEG bytes in, tracked positions out, with every pixel on the backend's device (issue 9's
end-to-end target: the worker at 12,000 frames/s on one H200, step 3).

:class:`GpuPipeline` serves many sessions at once. One :meth:`~GpuPipeline.push` takes the
JPEG frames that arrived for any sessions and:

1. decodes them as one batch (nvJPEG on the GPU where torchvision has CUDA, else ``cv2``):
   frames whose bytes repeat the session's previous frame are not decoded at all;
2. finds exact duplicates (pixels equal to the session's previous frame, as
   :class:`~ttball.frames.DuplicateFilter` does) on the device: one ``B``-bool copy to the host;
3. resizes on the device, bit-exact with ``cv2.resize`` (:class:`~.prepost_image.Resizer`);
4. keeps each session's recent resized frames on the device in a :class:`DeviceStream` (the
   windowing, padding, ordering and tracking of :class:`~ttball.stream.FrameStream`, which it
   subclasses), so a step-3 or step-1 window is three tensor references;
5. stacks all windows into batches of the sizes the backend was warmed for, normalises
   (:func:`ttball.frames.normalize`), runs the backend, applies the sigmoid and
   :func:`~.prepost_post.blob_stats`: ``max_blobs × 8`` numbers per heatmap cross to the host
   (plus the rare map that needs the exact host post-processing);
6. hands each frame's candidates to its stream's tracker: :class:`~ttball.results.FrameResult`
   rows per session, in frame order, equal to FrameStream + the CPU path.

With ``overlap=True`` a push does not wait for its own network: it decodes and prepares its
frames (on a side CUDA stream) while the previous push's batches run on the GPU, then reads
those back and tracks them, then launches its own; their rows come with the next push or
:meth:`~GpuPipeline.flush`. The rows are the same; each arrives one push later. With
``depth=2`` a push reads back the batches of the push before the previous one instead, so a
call has two pushes' time to run on a shared GPU before its lane waits for it; the rows arrive
two pushes later.

Not supported here: the SSIM near-duplicate filter (``dedup_ssim``; refused, not ignored).
"""

from __future__ import annotations

import bisect
import os
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ttball.backends.base import Backend
from ttball.cudasched import wait_event
from ttball.frames import host_to_device, normalizer
from ttball.kernels import copies
from ttball.kernels.arrival import Decoded
from ttball.kernels.decode_process import DecoderProcess
from ttball.kernels.prepost_image import (
    DECODERS,
    DecodeError,
    JpegDecoder,
    Resizer,
    decode_cv2,
    gpu_jpeg_reason,
    nvimgcodec_reason,
    stack_windows,
)
from ttball.kernels.prepost_post import (
    STATS,
    GraphedStats,
    PostOptions,
    blob_stats,
    detections,
    fused_windows_level,
    packed_stats,
)
from ttball.kernels.prepost_stream import DeviceStream, DeviceWindow, FrameRejected
from ttball.kernels.prepost_timing import (
    GPU_STAGES,
    GPU_STEPS,
    PAD_KERNELS_ENV,
    PAD_MATMULS_ENV,
    PadKernels,
    StageTimer,
    gpu_split,
)
from ttball.model.config import WeightsConfig
from ttball.postprocess import Detection, detect
from ttball.results import FrameResult
from ttball.stream import StreamOptions, Window

__all__ = [
    "DECODERS",
    "GPU_STAGES",
    "GPU_STEPS",
    "PAD_KERNELS_ENV",
    "PAD_MATMULS_ENV",
    "DecodeError",
    "DeviceStream",
    "DeviceWindow",
    "FrameRejected",
    "GpuPipeline",
    "GraphedStats",
    "JpegDecoder",
    "PadKernels",
    "PostOptions",
    "Resizer",
    "StageTimer",
    "blob_stats",
    "decode_cv2",
    "detections",
    "gpu_jpeg_reason",
    "nvimgcodec_reason",
    "packed_stats",
    "stack_windows",
]

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
THRESHOLD_CACHE = 64  # thresholds tensors kept a pipeline (emptied when full)


@dataclass
class _Session:
    stream: DeviceStream
    fps: float
    next_index: int = 0
    last_bytes: bytes | None = None
    last_frame: Tensor | None = None  # full-size (3, H, W) uint8, for the duplicate test
    last_small: Tensor | None = None  # the same frame resized
    rows: list[FrameResult] = field(default_factory=list)


@dataclass
class _InFlight:
    """One backend call, launched: its windows and their sessions, the packed candidate
    statistics (on the host once ``ready`` has passed; ``None``: a blocking copy is still to
    make), the unpadded logits (for the rare map that needs the host post-processing) and,
    with overlap on CUDA, the timing events of its steps on the stream (:func:`gpu_split`'s
    ``marks``; ``ready`` is the end)."""

    windows: list[Window]
    sessions: list[_Session]
    packed: Tensor
    ready: torch.cuda.Event | None
    logits: Tensor
    marks: tuple[tuple[str, Any], ...] = ()


class GpuPipeline:
    """Sessions' JPEG frames → decoded, resized, windowed, batched, run, post-processed on
    ``backend.device`` → per-session rows (see the module docstring for the steps)."""

    def __init__(
        self,
        backend: Backend,
        config: WeightsConfig,
        *,
        decoder: JpegDecoder | DecoderProcess | None = None,
        batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
        post: PostOptions | None = None,
        timer: StageTimer | None = None,
        graphs: bool | None = None,
        resize: str = "eager",
        max_batch: int | None = None,
        on_batch: Callable[[int, int], None] | None = None,
        overlap: bool = False,
        depth: int = 1,
        stats_stream: bool = False,
        decode_early: bool = False,
        carry: bool = False,
    ) -> None:
        """``graphs``: post-processing from CUDA graphs (default: on CUDA);
        ``resize``: the resize's :class:`Resizer` mode (``"eager"``, ``"compile"``: fused by
        ``torch.compile``, ``"triton"``: one Triton kernel, and the normalisation one too,
        :class:`~ttball.kernels.prepost_pixels.Normalizer`); ``max_batch``: windows per
        backend call at most (default: the largest batch size), each call padded up to one of
        ``batch_sizes``; ``on_batch(windows, padded_size)`` is called after every backend call;
        ``overlap``: a push leaves its batches running and returns the previous push's rows
        (see the module docstring; call :meth:`flush` when no push follows; the logits it
        keeps meanwhile are copied unless the backend's ``fresh_outputs``); ``depth`` (with
        ``overlap``): the pushes whose batches may be left running at once -- a push reads back
        the batches of the push ``depth`` before it, so with 2 a call has a whole push more to
        finish on a shared GPU before its lane waits for it, and its rows come a push later than
        at depth 1; ``stats_stream`` (with ``overlap`` on CUDA and a backend whose outputs
        are its own, ``fresh_outputs``): each call's statistics run on a stream of their own
        behind its network, so the lane's next network does not queue behind them;
        ``decode_early``:
        with a :class:`DecoderProcess` and ``upcoming`` frames, the next push's decode is sent
        before this push waits for its own (``DecoderProcess(blobs, then=...)``) instead of
        after; ``carry`` (with ``overlap``): a push whose windows (with those carried from the
        push before) fill more than one call of ``max_batch`` launches the full calls only and
        carries the rest to the next push, :meth:`flush` or :meth:`finish`, so a lane under
        load runs full batches instead of a short one after them; the carried windows' rows
        come a push later (:attr:`carried_sessions` says whose)."""
        self.backend, self.config = backend, config
        self.device = backend.device
        self.decoder = decoder or JpegDecoder(self.device)
        self.resizer = Resizer(config.input_height, config.input_width, mode=resize)
        self._normalize: Callable[[Tensor], Tensor] = normalizer(config, self.device)
        if resize == "triton":  # the normalisation as a kernel too (bit-exact with the CPU's)
            from ttball.kernels.prepost_pixels import Normalizer

            self._normalize = Normalizer(config, self.device)
        self.sizes = sorted(set(batch_sizes))
        self.max_batch = max_batch or self.sizes[-1]
        if not 1 <= self.max_batch <= self.sizes[-1]:
            raise ValueError(f"max_batch {self.max_batch} must be in 1..{self.sizes[-1]}, the "
                             "largest batch size")
        self.on_batch = on_batch
        self.post = post or PostOptions()
        use_graphs = self.device.type == "cuda" if graphs is None else graphs
        self._graphed = GraphedStats(self.post) if use_graphs else None
        self.graph_error: str | None = None
        self.timer = timer or StageTimer(self.device)
        self.overlap = overlap
        if not 1 <= depth <= 4:
            raise ValueError(f"depth must be in 1..4, got {depth}")
        self.depth = depth
        self.decode_early = decode_early
        self.carry = carry and overlap
        # carry: windows of the last push left for the next one (fewer than max_batch, the
        # oldest first, so each session's windows still launch in order)
        self._carry: list[Window] = []
        self.windows_carried = 0  # windows carried to a later push, since the pipeline was made
        # overlap on CUDA: decode and resize on their own stream, so the duplicate test's
        # read-back does not wait for the previous push's network on the default stream; of a
        # higher priority than it, so that their kernels are scheduled ahead of the network's that
        # fill the GPU meanwhile (nvImageCodec decodes on it too; torchvision's nvJPEG on a
        # stream of its own)
        self._side = (torch.cuda.Stream(self.device, priority=-1)
                      if overlap and self.device.type == "cuda" else None)
        # overlap: the batches of the last pushes (up to ``depth``), one list a push, oldest
        # first, not yet read back; pushes_launched / pushes_done count those lists (a caller
        # tells by them when the batches of a given push have been read back)
        self._pending: deque[list[_InFlight]] = deque()
        self.pushes_launched = self.pushes_done = 0
        self._ready: dict[str, _Session] = {}  # sessions with rows completed, not yet returned
        self._last_end: torch.cuda.Event | None = None  # overlap on CUDA: the last call's end
        self._marks: list[tuple[str, Any]] | None = None  # the call being launched's events
        # overlap keeps a call's logits until the next push reads it back: a private copy,
        # unless the backend's outputs are its own already (fresh_outputs: a CUDA-graph
        # backend's clone; one 28 MB copy a call of 16 less, no measurable change on the H200
        # in the thirty-fifth session); TTBALL_PIPELINE_CLONE=1 copies anyway (measurement)
        self._fresh = (bool(getattr(backend, "fresh_outputs", False))
                       and os.environ.get("TTBALL_PIPELINE_CLONE", "") != "1")
        # stats_stream: the statistics (a graph of ~150 small kernels, each waiting for room on
        # a shared GPU: ~9 ms of a call's ~40 on its stream in the thirty-sixth session) off the
        # lane's stream; only for a backend whose outputs no later call writes, so the next
        # network cannot overwrite the logits they read
        self._stats = (torch.cuda.Stream(self.device)
                       if stats_stream and self._side is not None and self._fresh else None)
        if self._timing and hasattr(backend, "set_marker"):
            backend.set_marker(lambda step: self._mark(f"net_{step}"))
        self._pad = PadKernels.from_env(self.device)  # TTBALL_PAD_* (measurement only)
        # TTBALL_FUSED_WINDOWS: read (and a bad value refused) now, not in the first capture
        self.fused_windows = fused_windows_level(torch.empty(0, device=self.device))
        self._sessions: dict[str, _Session] = {}
        # the sessions' streams and rows, the batches in flight and the rows ready: what a
        # push after its decode and resize, a flush, a finish and a close change, one thread at
        # a time (a flush may run on a thread of its own, ``serve --flush-thread``, waiting for
        # the GPU outside it while the next push decodes)
        self.lock = threading.RLock()
        self._threshold_cache: dict[tuple[float, ...], Tensor] = {}  # see _thresholds_of
        self.fallbacks = 0  # heatmaps post-processed on the host
        self.heatmaps = 0

    # -- sessions ---------------------------------------------------------------------------------
    def open(self, sid: str, options: StreamOptions | None = None,
             fps: float = 30.0) -> DeviceStream:
        """A new session; its stream (read its counters and geometry; feed it through push)."""
        if sid in self._sessions:
            raise ValueError(f"session {sid!r} is already open")
        stream = DeviceStream(self.config, options, sid)
        self._sessions[sid] = _Session(stream, fps)
        return stream

    def close(self, sid: str) -> None:
        """Forget ``sid``; its windows still in flight are dropped when they come back, those
        carried to the next push (``carry``) at once."""
        with self.lock:
            self._carry = [w for w in self._carry if w.stream_id != sid]
            self._sessions.pop(sid, None)
            self._ready.pop(sid, None)

    @property
    def in_flight(self) -> int:
        """Windows launched by the last pushes and not yet read back, and those carried to the
        next push (``overlap`` only)."""
        return sum(len(f.windows) for flights in self._pending for f in flights) + len(self._carry)

    @property
    def carried_sessions(self) -> set[str]:
        """The sessions with windows carried to the next push (``carry``): their rows come
        once the next push's batches (or a flush's, or a finish's) are read back."""
        return {w.stream_id for w in self._carry}

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, sid: object) -> bool:
        return sid in self._sessions

    # -- frames in --------------------------------------------------------------------------------
    def push(self, frames: Sequence[tuple[str, bytes]],
             stamps: Sequence[tuple[int, float]] | None = None,
             upcoming: Sequence[tuple[str, bytes]] = (),
             deliver: Callable[[dict[str, list[FrameResult]]], None] | None = None,
             decoded: Sequence[Decoded | None] = (),
             ) -> dict[str, list[FrameResult]]:
        """JPEG frames ``(session id, bytes)`` in arrival order → rows each session finished.

        ``stamps``: each frame's ``(index, time_s)`` (increasing per session); default: the
        session's next index and ``index / fps``. A frame that does not decode or has another
        size than its session's raises :class:`FrameRejected` and nothing is taken.

        ``upcoming``: the frames of the push expected next. With a decoder that can prefetch
        (:class:`DecoderProcess`) their decode starts as soon as this push's frames are
        decoded (with ``decode_early``, before this push waits for its own), so it runs while
        this push is prepared, run and read back; the next push takes those frames if its own
        begin with them, and decodes afresh otherwise.

        With ``overlap``, the rows are those the previous push's batches finished (and any this
        push's frames finish without a window), for every session concerned.

        ``deliver``: called with the rows before the push lets go of :attr:`lock`, so rows
        handed on by another thread's :meth:`flush` never overtake them. The decode and
        resize run outside the lock (they touch only the sessions' previous frames).

        ``decoded``: the frames decoded already (:class:`~ttball.kernels.arrival.Decoded`,
        ``serve --decode-on-arrival``), in order, as runs of ``frames``: a run's frames are
        not decoded again (None: a run of one frame decoded here). Their sizes are checked as
        any frame's."""
        sessions = [self._get(sid) for sid, _ in frames]
        with self._on_side():
            with self.timer.stage("decode"):
                images, repeats = self._decode(frames, sessions, upcoming, decoded)
            with self.timer.stage("preprocess"):
                smalls, duplicates = self._prepare(images, repeats, sessions)
        with self.lock:
            rows = self._push_windows(frames, stamps, sessions, images, smalls, duplicates)
            if deliver is not None:
                deliver(rows)
        return rows

    def _push_windows(self, frames: Sequence[tuple[str, bytes]],
                      stamps: Sequence[tuple[int, float]] | None, sessions: list[_Session],
                      images: list[Tensor], smalls: list[Tensor], duplicates: list[bool],
                      ) -> dict[str, list[FrameResult]]:
        """:meth:`push` once its frames are decoded and resized (under :attr:`lock`)."""
        windows: list[Window] = []
        touched: dict[str, _Session] = {}
        for k, ((sid, _), session, image, small, dup) in enumerate(
                zip(frames, sessions, images, smalls, duplicates)):
            index, time_s = (stamps[k] if stamps is not None
                             else (session.next_index, session.next_index / session.fps))
            session.next_index = index + 1
            size = (image.shape[-1], image.shape[-2])
            windows.extend(session.stream.push_device(index, time_s, size, dup, small))
            touched[sid] = session
        if self.overlap:
            self._complete(self._take_pending(keep=self.depth - 1))
            self._join_side()
            chunks = self._chunks(self._carry + windows)
            self._carry = []
            if self.carry and len(chunks) > 1 and len(chunks[-1]) < self.max_batch:
                self._carry = chunks.pop()
                self.windows_carried += len(self._carry)
            self._launch_push(chunks)
        else:
            self._run(windows)
        return self._collect(touched)

    def flush(self, timer: StageTimer | None = None,
              waited: Sequence[list[_InFlight]] | None = None) -> dict[str, list[FrameResult]]:
        """``overlap``: read back and track what the last push left running; the rows of
        every session that has some (empty without overlap or when nothing is in flight); the
        windows carried (``carry``) are launched first. ``timer``: where its stages' time goes
        (default :attr:`timer`; a flush on a thread of its own keeps it out of the pushes').
        ``waited``: what :meth:`wait_in_flight` waited for; only those pushes still in flight
        are read back (a push launched since is left to the next flush, so this one does not
        wait for the GPU holding the lock)."""
        with self.lock:
            self._launch_carried()
            keep = 0
            if waited is not None:
                done = 0
                while done < len(self._pending) and any(self._pending[done] is w for w in waited):
                    done += 1
                keep = len(self._pending) - done
            self._complete(self._take_pending(keep), timer)
            return self.take_ready()

    def wait_in_flight(self) -> list[list[_InFlight]]:
        """Wait, outside :attr:`lock`, until the pushes in flight now are done on the device
        (their statistics on the host), and return them for :meth:`flush` (``waited``), which
        then reads them back without waiting; a push may run meanwhile. Nothing to wait for
        without overlap on CUDA."""
        with self.lock:
            pushes = list(self._pending)
        for flights in pushes:
            for flight in flights:
                if flight.ready is not None:
                    flight.ready.synchronize()
        return pushes

    def take_ready(self) -> dict[str, list[FrameResult]]:
        """Rows already read back and not yet returned: those of other sessions that a
        :meth:`finish` read back with its own (``overlap``); waits for nothing."""
        with self.lock:
            return self._collect({})

    def finish(self, sid: str) -> list[FrameResult]:
        """No more frames for ``sid``: its last rows; the session is closed. (With
        ``overlap``, the batches in flight are read back first; other sessions' rows among
        them come with the next push or flush.)"""
        with self.lock:
            session = self._get(sid)
            self._launch_carried()
            self._complete(self._take_pending())
            self._join_side()
            self._run(session.stream.finish())
            session.rows.extend(session.stream.drain())
            self.close(sid)
            return self._take(session)

    def _collect(self, touched: dict[str, _Session]) -> dict[str, list[FrameResult]]:
        """Rows of the sessions given and of those whose windows completed since the last
        call, each drained as far as its frames are final."""
        sessions, self._ready = {**self._ready, **touched}, {}
        out = {}
        for sid, session in sessions.items():
            if self._sessions.get(sid) is not session:
                continue  # closed meanwhile
            if session.stream.frames_in - session.stream.duplicates >= 3:
                session.rows.extend(session.stream.drain())
            out[sid] = self._take(session)
        return out

    def _launch_carried(self) -> None:
        """The windows carried from the last push as a push of their own (so the uploads
        waiting for the push after it resolve once they are read back)."""
        carried, self._carry = self._carry, []
        self._launch_push([carried] if carried else [])

    def _launch_push(self, chunks: list[list[Window]]) -> None:
        """One backend call a chunk, left running as one push (counted in
        ``pushes_launched``; nothing when there are no chunks)."""
        flights = [self._launch(chunk) for chunk in chunks]
        if flights:
            self._pending.append(flights)
            self.pushes_launched += 1

    def _take_pending(self, keep: int = 0) -> list[_InFlight]:
        """The batches left running by all but the last ``keep`` pushes, oldest first (those
        pushes counted as done)."""
        pending: list[_InFlight] = []
        while len(self._pending) > keep:
            pending.extend(self._pending.popleft())
            self.pushes_done += 1
        return pending

    def _on_side(self) -> AbstractContextManager[object]:
        return torch.cuda.stream(self._side) if self._side is not None else nullcontext()

    @property
    def stats_stream(self) -> bool:
        """Whether the statistics run on a stream of their own (see ``stats_stream``)."""
        return self._stats is not None

    def _on_stats(self, logits: Tensor) -> AbstractContextManager[object]:
        """With ``stats_stream``: the statistics' stream, made to wait for the network that
        wrote ``logits`` (which it then uses: the allocator keeps them for it)."""
        if self._stats is None:
            return nullcontext()
        self._stats.wait_stream(torch.cuda.current_stream(self.device))
        logits.record_stream(self._stats)
        return torch.cuda.stream(self._stats)

    def _join_side(self) -> None:
        """The default stream waits for the side stream's decode and resize."""
        if self._side is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._side)

    def _get(self, sid: str) -> _Session:
        try:
            return self._sessions[sid]
        except KeyError:
            raise KeyError(f"no open session {sid!r}") from None

    @staticmethod
    def _take(session: _Session) -> list[FrameResult]:
        rows, session.rows = session.rows, []
        return rows

    def _decode(self, frames: Sequence[tuple[str, bytes]], sessions: Sequence[_Session],
                upcoming: Sequence[tuple[str, bytes]] = (),
                decoded: Sequence[Decoded | None] = ()) -> tuple[list[Tensor], list[bool]]:
        """Decode every frame whose bytes differ from its session's previous frame (a repeat
        reuses that frame's tensor) and that ``decoded`` does not bring, then start the decode
        of ``upcoming``'s (see :meth:`push`). Sizes are checked before any session changes, so
        a bad frame never half-enters a stream."""
        last_bytes = _last_bytes(sessions)
        todo, where, repeats = _to_decode(frames, sessions, last_bytes)
        given = self._given(decoded, len(frames))
        if given:
            todo = [data for data, position in zip(todo, where) if position not in given]
            where = [position for position in where if position not in given]
        process = self.decoder if isinstance(self.decoder, DecoderProcess) else None
        ahead = self._ahead_todo(upcoming, last_bytes) if upcoming and process else None
        try:
            if process is None:
                images_out = iter(self.decoder(todo))
            elif ahead is not None and self.decode_early:
                images_out = iter(process(todo, then=ahead))
            else:
                images_out = iter(process(todo))
                if ahead is not None:
                    process.prefetch(ahead)
            if process is not None and todo:
                for part, seconds in process.last_seconds.items():
                    self.timer.seconds[f"decode_{part}"] += seconds
        except DecodeError as exc:
            position = where[exc.index]
            raise FrameRejected(position, "decode", frames[position][0],
                                "not a decodable JPEG") from exc
        images: list[Tensor] = []
        last: dict[int, Tensor | None] = {id(s): s.last_frame for s in sessions}
        for position, ((sid, _), repeat, session) in enumerate(zip(frames, repeats, sessions)):
            image = (last[id(session)] if repeat
                     else given[position] if position in given else next(images_out))
            assert image is not None
            self._check_size(position, sid, session, last[id(session)], image)
            images.append(image)
            last[id(session)] = image
        for (_, data), session in zip(frames, sessions):
            session.last_bytes = data
        return images, repeats

    def _given(self, decoded: Sequence[Decoded | None], n: int) -> dict[int, Tensor]:
        """The frames ``decoded`` brings, by position among ``n`` frames, once the current
        stream waits for their decode."""
        given: dict[int, Tensor] = {}
        if not decoded:
            return given
        covered = sum(1 if run is None else len(run.images) for run in decoded)
        if covered != n:
            raise ValueError(f"decoded covers {covered} frames of the push's {n}")
        stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        position = 0
        for run in decoded:
            if run is None:
                position += 1
                continue
            for image in run.use_on(stream):
                given[position] = image
                position += 1
        return given

    def _ahead_todo(self, upcoming: Sequence[tuple[str, bytes]],
                    last_bytes: dict[int, bytes | None]) -> list[bytes] | None:
        """The frames the next push would decode, were it ``upcoming`` and this push taken as
        it is (``last_bytes``: each of its sessions' bytes after it); None when a session of
        ``upcoming`` is not open."""
        sessions = [s for sid, _ in upcoming if (s := self._sessions.get(sid)) is not None]
        if len(sessions) < len(upcoming):
            return None
        after = {**_last_bytes(sessions), **last_bytes}
        todo, _, _ = _to_decode(upcoming, sessions, after)
        return todo

    @staticmethod
    def _check_size(position: int, sid: str, session: _Session, previous: Tensor | None,
                    image: Tensor) -> None:
        geom = session.stream.geometry
        expected = (geom.source_height, geom.source_width) if geom is not None else None
        if expected is None and previous is not None:
            expected = (int(previous.shape[-2]), int(previous.shape[-1]))
        got = tuple(image.shape[-2:])
        if expected is not None and got != expected:
            raise FrameRejected(position, "size", sid,
                                f"frame is {got[1]}x{got[0]}, the session's frames are "
                                f"{expected[1]}x{expected[0]}")

    def _prepare(self, images: list[Tensor], repeats: list[bool], sessions: Sequence[_Session]
                 ) -> tuple[list[Tensor], list[bool]]:
        """Resized frames (grouped by source size) and duplicate flags.

        A frame is a duplicate when its pixels equal its session's previous frame. Resized
        copies are compared first (equal full frames have equal resized ones; one ``B``-bool
        copy to the host); only the rare pairs equal there are compared at full size."""
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, image in enumerate(images):
            groups[tuple(image.shape)].append(i)
        smalls: list[Tensor] = list(images)
        for members in groups.values():
            for i, small in zip(members, self.resizer([images[i] for i in members])):
                smalls[i] = small
        previous: list[tuple[Tensor, Tensor] | None] = []
        last = {id(s): (s.last_frame, s.last_small) for s in sessions}
        for image, small, session in zip(images, smalls, sessions):
            before = last[id(session)]
            previous.append(None if before[0] is None else before)  # type: ignore[arg-type]
            last[id(session)] = (image, small)
        for session in sessions:
            session.last_frame, session.last_small = last[id(session)]
        duplicates = [r and p is not None for r, p in zip(repeats, previous)]
        pairs = [i for i, p in enumerate(previous) if p is not None and not repeats[i]]
        if pairs:
            prev = torch.stack([previous[i][1] for i in pairs])  # type: ignore[index]
            cur = torch.stack([smalls[i] for i in pairs])
            differ = (prev != cur).flatten(1).any(1).cpu().tolist()
            for i, diff in zip(pairs, differ):
                if not diff:
                    duplicates[i] = torch.equal(previous[i][0], images[i])  # type: ignore[index]
        return smalls, duplicates

    # -- windows through the backend ----------------------------------------------------------------
    def _chunks(self, windows: list[Window]) -> list[list[Window]]:
        return [windows[start : start + self.max_batch] for start in range(0, len(windows), self.max_batch)]

    def _run(self, windows: list[Window]) -> None:
        """Each backend call launched and read back before the next."""
        for chunk in self._chunks(windows):
            self._complete([self._launch(chunk)])

    def _launch(self, windows: list[Window]) -> _InFlight:
        """One backend call (padded up to a warmed size) and the candidate statistics, queued
        on the device. With ``overlap`` the statistics are copied to pinned host memory behind
        an event and the logits kept in a private copy: a CUDA-graph backend overwrites its
        output buffers at its next call, which may come before this one is read back."""
        size = self.sizes[bisect.bisect_left(self.sizes, len(windows))]
        padded = windows + [windows[-1]] * (size - len(windows))
        sessions = [self._sessions[w.stream_id] for w in windows]
        self._marks = [] if self._timing else None
        with self.timer.stage("preprocess"):
            self._mark("start")
            batch = self._normalize(stack_windows([w.frames for w in padded]))  # type: ignore[attr-defined]
            self._mark("normalize")
        with self.timer.stage("network"):
            logits = self.backend(batch)
            self._mark("network")
        if self.on_batch is not None:
            self.on_batch(len(windows), size)
        with self.timer.stage("postprocess"), self.timer.stage("post_launch"), \
                self._on_stats(logits):
            # the statistics of the padded batch, so their graph is one of a warmed size (a
            # frozen pipeline never meets a new shape); the padding's rows are dropped after
            thresholds = self._thresholds_of(padded, logits.device)
            self._mark("stats_upload")
            packed = self._packed(logits, thresholds)[: 3 * len(windows)]
            self._mark("stats_graph")
            logits = logits[: len(windows)]
            ready = None
            if self.overlap:
                if not self._fresh:
                    logits = copies.clone(logits)
                self._mark("stats_clone")
                if packed.device.type == "cuda":  # (on the CPU, packed_stats' output is new)
                    host = torch.empty(packed.shape, dtype=packed.dtype, pin_memory=True)
                    packed = host.copy_(packed, non_blocking=True)
                    ready = wait_event(self._timing, self.device.index or 0)
                    ready.record()
            if self._pad is not None:  # behind the statistics' event: not in this call's wait
                # (the products on their own stream: in no call's chain)
                self._pad()
        marks, self._marks = tuple(self._marks or ()), None
        return _InFlight(windows, sessions, packed, ready, logits, marks)

    @property
    def _timing(self) -> bool:
        """Timing events on each call's steps (overlap on CUDA)."""
        return self.overlap and self.device.type == "cuda"

    def _mark(self, name: str) -> None:
        """A timing event closing step ``name`` of the call being launched, on the current
        stream (only while one is: see :meth:`_launch`)."""
        if self._marks is not None:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append((name, event))

    def _complete(self, flights: list[_InFlight], timer: StageTimer | None = None) -> None:
        """Read launched calls back, in order: candidates to each window's stream (skipping
        sessions closed meanwhile); the sessions are then ready for :meth:`_collect`.
        ``timer``: see :meth:`flush`."""
        timer = timer or self.timer
        for flight in flights:
            with timer.stage("postprocess"):
                found = self._post(flight, timer)
            with timer.stage("track"):
                for window, session, per_position in zip(flight.windows, flight.sessions, found):
                    if self._sessions.get(window.stream_id) is not session:
                        continue
                    session.rows.extend(session.stream.complete_found(window, per_position))
                    self._ready[window.stream_id] = session

    def _post(self, flight: _InFlight, timer: StageTimer) -> list[list[list[Detection]]]:
        """A launched call's packed statistics → candidates per window and position."""
        if flight.ready is not None:
            with timer.stage("post_wait"):
                flight.ready.synchronize()
            if flight.marks:
                for stage, seconds in gpu_split(flight.marks, flight.ready,
                                                self._last_end).items():
                    timer.seconds[stage] += seconds
                self._last_end = flight.ready
        with timer.stage("post_read"):
            return self._read(flight)

    def _read(self, flight: _InFlight) -> list[list[list[Detection]]]:
        """:meth:`_post` once the call's statistics are on the host."""
        packed = flight.packed.cpu().numpy()
        logits = flight.logits
        streams = [s.stream for s in flight.sessions]
        stats = packed[:, :-1].reshape(len(packed), self.post.max_blobs, STATS)
        need_host = packed[:, -1].nonzero()[0]
        self.heatmaps += len(packed)
        self.fallbacks += len(need_host)
        host_maps = {}
        if need_host.size:
            maps = logits.flatten(0, 1)[torch.from_numpy(need_host).to(logits.device)]
            host_maps = dict(zip(need_host.tolist(), torch.sigmoid(maps.float()).cpu().numpy()))
        out = []
        for i, stream in enumerate(streams):
            geom = stream.geometry
            assert geom is not None
            per_position = []
            for j in range(3 * i, 3 * i + 3):
                if j in host_maps:
                    per_position.append(detect(host_maps[j], geom, stream.threshold))
                else:
                    per_position.append(detections(stats[j], geom))
            out.append(per_position)
        return out

    @property
    def normalizing(self) -> tuple[str, str | None]:
        """How windows are normalised, ``"eager"`` (torch ops), ``"triton"`` (one kernel) or
        ``"lookup"`` (its torch fallback), and why the kernel failed if it did."""
        return (getattr(self._normalize, "running", "eager"),
                getattr(self._normalize, "error", None))

    def freeze_graphs(self) -> None:
        """No CUDA graph captures from now on, the backend's or post-processing's: for a
        process that pushes several pipelines from threads (a capture fails while another
        thread launches or syncs); what has no graph then runs eagerly."""
        freeze = getattr(self.backend, "freeze_graphs", None)  # BackendBase's; not the Protocol's
        if freeze is not None:
            freeze()
        if self._graphed is not None:
            self._graphed.frozen = True

    @property
    def uncaptured(self) -> int:
        """Calls run eagerly since :meth:`freeze_graphs` (backend and post-processing)."""
        backend = getattr(self.backend, "uncaptured_calls", 0)  # BackendBase's; not the Protocol's
        return backend + getattr(self._graphed, "uncaptured", 0)

    def _thresholds_of(self, windows: list[Window], device: torch.device) -> Tensor:
        """The windows' sessions' thresholds, three a window (one a frame), on ``device``: one
        upload for each combination met (sessions mostly share theirs), then kept -- six host
        operations a call less, each a chance for another thread to take the interpreter lock
        (``docs/benchmarks/h200-2026-12-06/``). Read only, by the statistics."""
        key = tuple(self._sessions[w.stream_id].stream.threshold for w in windows)
        thresholds = self._threshold_cache.get(key)
        if thresholds is None:
            if len(self._threshold_cache) >= THRESHOLD_CACHE:
                self._threshold_cache.clear()
            thresholds = host_to_device(  # no wait for the network just launched
                torch.tensor([t for t in key for _ in range(3)], dtype=torch.float32), device)
            self._threshold_cache[key] = thresholds
        return thresholds

    def _packed(self, logits: Tensor, thresholds: Tensor) -> Tensor:
        if self._graphed is not None:
            try:
                return self._graphed(logits, thresholds)
            except Exception as exc:  # noqa: BLE001  (reported in graph_error; eager is the same)
                self.graph_error = f"{type(exc).__name__}: {exc}"
                self._graphed = None
        return packed_stats(logits, thresholds, self.post)


def _last_bytes(sessions: Sequence[_Session]) -> dict[int, bytes | None]:
    """Each session's previous frame's bytes by ``id`` (``None`` before its first frame)."""
    return {id(s): s.last_bytes if s.last_frame is not None else None for s in sessions}


def _to_decode(frames: Sequence[tuple[str, bytes]], sessions: Sequence[_Session],
               last_bytes: dict[int, bytes | None]) -> tuple[list[bytes], list[int], list[bool]]:
    """The bytes to decode of ``frames`` (those that differ from their session's previous
    frame), their positions, and whether each frame repeats; ``last_bytes`` (by ``id`` of the
    session) is brought up to date."""
    todo, where, repeats = [], [], []
    for position, ((_, data), session) in enumerate(zip(frames, sessions)):
        repeats.append(last_bytes[id(session)] == data)
        if not repeats[-1]:
            todo.append(data)
            where.append(position)
        last_bytes[id(session)] = data
    return todo, where, repeats

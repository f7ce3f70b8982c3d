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
import itertools
import os
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ttball.backends.base import Backend, capture_graph, synchronize
from ttball.cudasched import wait_event
from ttball.frames import host_to_device, normalizer
from ttball.kernels import copies
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
from ttball.model.config import WeightsConfig
from ttball.postprocess import Detection, detect
from ttball.results import FrameResult
from ttball.stream import FrameStream, StreamOptions, Window

__all__ = [
    "DECODERS",
    "DecodeError",
    "DeviceStream",
    "DeviceWindow",
    "FrameRejected",
    "GpuPipeline",
    "GraphedStats",
    "JpegDecoder",
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


class FrameRejected(ValueError):
    """A frame :meth:`GpuPipeline.push` refuses before any session has changed: it does not
    decode (``reason == "decode"``) or its size differs from its session's (``"size"``).
    ``index`` is its position in the pushed ``frames``; ``detail`` says what is wrong."""

    def __init__(self, index: int, reason: str, sid: str, detail: str) -> None:
        super().__init__(f"session {sid}, frame {index} of the push: {detail}")
        self.index, self.reason, self.detail = index, reason, detail


@dataclass
class DeviceWindow(Window):
    """A :class:`~ttball.stream.Window` whose frames are ``(3, h, w) uint8`` device tensors
    (``pixels`` stays empty: nothing is copied until the batch is stacked)."""

    frames: tuple[Tensor, ...] = ()


class DeviceStream(FrameStream):
    """:class:`FrameStream` with frames already decoded, resized and de-duplicated on the device
    and candidates found there: :meth:`push_device` replaces ``push``, :meth:`complete_found`
    replaces ``complete``; windowing, finish, emit order and the tracker are FrameStream's."""

    def __init__(self, config: WeightsConfig, options: StreamOptions | None = None,
                 stream_id: str = "") -> None:
        super().__init__(config, options, stream_id)
        if self.options.dedup_ssim is not None:
            raise ValueError("the device path drops exact duplicates only; dedup_ssim is not supported")

    def push(self, frame: object) -> list[Window]:  # type: ignore[override]
        raise TypeError("DeviceStream takes device frames: use push_device")

    def push_device(self, index: int, time_s: float, size: tuple[int, int], duplicate: bool,
                    small: Tensor) -> list[Window]:
        """One frame: its source ``size`` (width, height), whether it repeats the previous
        frame exactly, and its resized pixels ``(3, h, w) uint8``; ``FrameStream.push`` for
        frames decoded and resized on the device."""
        self._admit(index, *size)
        return self._keep(index, time_s, None if duplicate and self._kept else small)

    def _window(self, slots: tuple[int, int, int]) -> Window:
        for s in set(slots):
            self._kept[s].open_windows += 1
        self.windows_out += 1
        frames = tuple(self._kept[s].pixels for s in slots)
        return DeviceWindow(self.stream_id, slots, np.empty(0, np.uint8), frames)  # type: ignore[arg-type]

    def complete_found(self, window: Window, found: Sequence[list[Detection]]) -> list[FrameResult]:
        """A window's candidates per position (oldest first), found on the device;
        ``FrameStream.complete`` without the heatmaps."""
        return self._complete(window, lambda position: found[position])


class StageTimer:
    """Seconds per stage: ``seconds`` on the wall clock, ``cpu_seconds`` on the calling thread's
    CPU clock (what a stage's wall time holds beyond its CPU time, the thread spent off the CPU:
    waiting for the device, a child process, or the interpreter lock). ``sync=True`` waits for
    the device at each stage's end, so the time lands on the stage that spent it (costs the
    overlap; for measurement only)."""

    def __init__(self, device: torch.device, sync: bool = False) -> None:
        self.device, self.sync = device, sync
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu_seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            if self.sync:
                synchronize(self.device)
            self.seconds[name] += time.perf_counter() - start
            self.cpu_seconds[name] += time.thread_time() - cpu


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


#: ``TTBALL_PAD_KERNELS=N`` (measurement only): each backend call adds N empty kernels on its
#: stream after its statistics, from one CUDA graph (one launch on the host, ~N µs of GPU
#: time). Whether the worker's pace follows the number of GPU operations its clients send
#: rather than their GPU time (docs/benchmarks/e2e.md: it does not, thirty-eighth session).
PAD_KERNELS_ENV = "TTBALL_PAD_KERNELS"
#: ``TTBALL_PAD_MATMULS=M`` (measurement only): M half-precision 4096 × 4096 matrix products
#: with each call, from a CUDA graph on a stream of their own (~0.14 TFLOP each, ~0.19 ms of a
#: whole H200 alone): GPU time with few operations and outside the lane's chain of work, the
#: converse of ``TTBALL_PAD_KERNELS`` -- whether the worker's pace follows the GPU time its
#: clients share.
PAD_MATMULS_ENV = "TTBALL_PAD_MATMULS"
PAD_MATMUL_SIDE = 4096


def _pad_count(name: str) -> int:
    value = os.environ.get(name, "")
    if not value:
        return 0
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name} must be a positive count, got {value!r}")
    return int(value)


class PadKernels:
    """``count`` one-element adds captured in one CUDA graph, replayed on the current stream,
    and ``matmuls`` matrix products (``side`` × ``side``, float16) in another, replayed on a
    stream of their own that waits for nothing; calling it replays both."""

    def __init__(self, count: int, device: torch.device, matmuls: int = 0,
                 side: int = PAD_MATMUL_SIDE) -> None:
        if count < 0 or matmuls < 0 or count + matmuls < 1:
            raise ValueError(f"{PAD_KERNELS_ENV} and {PAD_MATMULS_ENV} must be counts, not both "
                             f"0, got {count} and {matmuls}")
        self.count, self.matmuls = count, matmuls
        self._kernels = self._products = None
        self._x = torch.zeros(1, device=device)
        self._mats = torch.randn(3, side, side, device=device).half() if matmuls else None
        if count:
            self._kernels = capture_graph(self._adds, device,
                                          capture_error_mode="thread_local")[0]
        if matmuls:
            self._products = capture_graph(self._matmuls, device,
                                           capture_error_mode="thread_local")[0]
            self._stream = torch.cuda.Stream(device)

    def _adds(self) -> None:
        for _ in range(self.count):
            self._x.add_(0)

    def _matmuls(self) -> None:
        a, b, out = self._mats
        for _ in range(self.matmuls):
            torch.mm(a, b, out=out)

    @classmethod
    def from_env(cls, device: torch.device) -> PadKernels | None:
        """The environment's padding (None when unset or not on CUDA)."""
        count, matmuls = _pad_count(PAD_KERNELS_ENV), _pad_count(PAD_MATMULS_ENV)
        if not count and not matmuls:
            return None
        return cls(count, device, matmuls) if device.type == "cuda" else None

    def __call__(self) -> None:
        if self._kernels is not None:
            self._kernels.replay()
        if self._products is not None:
            with torch.cuda.stream(self._stream):
                self._products.replay()


# With overlap on CUDA, each call's time on its stream (``StageTimer`` stages, seconds): the
# stream idle or waiting since the previous call's end (for the side stream's decode and resize,
# or with nothing queued), the windows' stacking and normalisation, the network, and the
# statistics with their copy to the host. Read once the call is back, so a push's figures are
# its previous push's calls'.
GPU_STAGES = ("gpu_between", "gpu_normalize", "gpu_network", "gpu_stats")
# Their parts: the network's copy into a CUDA-graph backend's input, its graph and the copy of
# its output (with a backend that marks them: GraphedBackend.set_marker), and the statistics'
# thresholds' upload, graph, the logits' private copy and the copy to the host.
GPU_STEPS = ("gpu_net_copy_in", "gpu_net_graph", "gpu_net_copy_out", "gpu_stats_upload",
             "gpu_stats_graph", "gpu_stats_clone", "gpu_stats_to_host")


def gpu_split(marks: Sequence[tuple[str, Any]], end: Any,
              previous_end: Any | None) -> dict[str, float]:
    """Seconds of :data:`GPU_STAGES` and :data:`GPU_STEPS` from a call's timing events.

    ``marks``: ``(name, event)`` in the order queued, each event closing the step it names:
    ``start`` (before the normalisation), ``normalize``, the backend's ``net_copy_in`` and
    ``net_graph`` if it marks them, ``network`` (the backend call's end), then
    ``stats_upload``, ``stats_graph``, ``stats_clone``; ``end``: after the copy to the host
    (closes ``stats_to_host``); ``previous_end``: the previous call's ``end`` on the same stream
    (None: the first call, no ``gpu_between``). Events complete: ``elapsed_time`` is in ms."""
    named = dict(marks)

    def seconds(before: Any, after: Any) -> float:
        return before.elapsed_time(after) / 1e3

    out = {"gpu_normalize": seconds(named["start"], named["normalize"]),
           "gpu_network": seconds(named["normalize"], named["network"]),
           "gpu_stats": seconds(named["network"], end)}
    steps = [*marks, ("stats_to_host", end)]
    for (_, before), (name, after) in itertools.pairwise(steps):
        if name == "network":
            name = "net_copy_out" if "net_graph" in named else ""
        if name and name != "normalize":
            out[f"gpu_{name}"] = seconds(before, after)
    if previous_end is not None:
        out["gpu_between"] = seconds(previous_end, named["start"])
    return out


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
        compile_resize: bool = False,
        max_batch: int | None = None,
        on_batch: Callable[[int, int], None] | None = None,
        overlap: bool = False,
        depth: int = 1,
        stats_stream: bool = False,
        decode_early: bool = False,
        carry: bool = False,
    ) -> None:
        """``graphs``: post-processing from CUDA graphs (default: on CUDA);
        ``compile_resize``: the resize fused by ``torch.compile``; ``max_batch``: windows per
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
        self.resizer = Resizer(config.input_height, config.input_width, compile=compile_resize)
        self._normalize = normalizer(config, self.device)
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
             upcoming: Sequence[tuple[str, bytes]] = ()) -> dict[str, list[FrameResult]]:
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
        push's frames finish without a window), for every session concerned."""
        sessions = [self._get(sid) for sid, _ in frames]
        with self._on_side():
            with self.timer.stage("decode"):
                images, repeats = self._decode(frames, sessions, upcoming)
            with self.timer.stage("preprocess"):
                smalls, duplicates = self._prepare(images, repeats, sessions)
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

    def flush(self) -> dict[str, list[FrameResult]]:
        """``overlap``: read back and track what the last push left running; the rows of
        every session that has some (empty without overlap or when nothing is in flight); the
        windows carried (``carry``) are launched first."""
        self._launch_carried()
        self._complete(self._take_pending())
        return self.take_ready()

    def take_ready(self) -> dict[str, list[FrameResult]]:
        """Rows already read back and not yet returned: those of other sessions that a
        :meth:`finish` read back with its own (``overlap``); waits for nothing."""
        return self._collect({})

    def finish(self, sid: str) -> list[FrameResult]:
        """No more frames for ``sid``: its last rows; the session is closed. (With
        ``overlap``, the batches in flight are read back first; other sessions' rows among
        them come with the next push or flush.)"""
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
                upcoming: Sequence[tuple[str, bytes]] = ()) -> tuple[list[Tensor], list[bool]]:
        """Decode every frame whose bytes differ from its session's previous frame (a repeat
        reuses that frame's tensor), then start the decode of ``upcoming``'s (see
        :meth:`push`). Sizes are checked before any session changes, so a bad frame never
        half-enters a stream."""
        last_bytes = _last_bytes(sessions)
        todo, where, repeats = _to_decode(frames, sessions, last_bytes)
        process = self.decoder if isinstance(self.decoder, DecoderProcess) else None
        ahead = self._ahead_todo(upcoming, last_bytes) if upcoming and process else None
        try:
            if process is None:
                decoded = iter(self.decoder(todo))
            elif ahead is not None and self.decode_early:
                decoded = iter(process(todo, then=ahead))
            else:
                decoded = iter(process(todo))
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
            image = last[id(session)] if repeat else next(decoded)
            assert image is not None
            self._check_size(position, sid, session, last[id(session)], image)
            images.append(image)
            last[id(session)] = image
        for (_, data), session in zip(frames, sessions):
            session.last_bytes = data
        return images, repeats

    def _ahead_todo(self, upcoming: Sequence[tuple[str, bytes]],
                    last_bytes: dict[int, bytes | None]) -> list[bytes] | None:
        """The frames the next push would decode, were it ``upcoming`` and this push taken as
        it is (``last_bytes``: each of its sessions' bytes after it); None when a session of
        ``upcoming`` is not open."""
        sessions = [self._sessions.get(sid) for sid, _ in upcoming]
        if any(session is None for session in sessions):
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
            expected = tuple(previous.shape[-2:])
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
            for i, small in zip(members, self.resizer(torch.stack([images[i] for i in members]))):
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
            thresholds = host_to_device(  # no wait for the network just launched
                torch.tensor([self._sessions[w.stream_id].stream.threshold
                              for w in padded for _ in range(3)],
                             dtype=torch.float32), logits.device)
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

    def _complete(self, flights: list[_InFlight]) -> None:
        """Read launched calls back, in order: candidates to each window's stream (skipping
        sessions closed meanwhile); the sessions are then ready for :meth:`_collect`."""
        for flight in flights:
            with self.timer.stage("postprocess"):
                found = self._post(flight)
            with self.timer.stage("track"):
                for window, session, per_position in zip(flight.windows, flight.sessions, found):
                    if self._sessions.get(window.stream_id) is not session:
                        continue
                    session.rows.extend(session.stream.complete_found(window, per_position))
                    self._ready[window.stream_id] = session

    def _post(self, flight: _InFlight) -> list[list[list[Detection]]]:
        """A launched call's packed statistics → candidates per window and position."""
        if flight.ready is not None:
            with self.timer.stage("post_wait"):
                flight.ready.synchronize()
            if flight.marks:
                for stage, seconds in gpu_split(flight.marks, flight.ready,
                                                self._last_end).items():
                    self.timer.seconds[stage] += seconds
                self._last_end = flight.ready
        with self.timer.stage("post_read"):
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

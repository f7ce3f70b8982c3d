"""``ttball serve --device-pipeline``: sessions' JPEG bytes → tracked rows, every pixel on the
backend's device (:class:`~ttball.kernels.prepost.GpuPipeline`; issue 9's end-to-end path).

In this mode a session opened without ``dedup_ssim`` lives in the worker's one GpuPipeline (its
stream is the pipeline's :class:`~ttball.kernels.prepost.DeviceStream`) and takes JPEG frames
only. The routes do not decode them:

1. :class:`DeviceFeeder` (event loop) reads each frame's size from its JPEG header, numbers the
   frames (``?frame=``, ``?t=``, the session's size: :meth:`Session.stamps`) and queues one
   :class:`Upload` per request in the shared :class:`~.batcher.Batcher`, which admits it at
   ``WINDOW // step`` units per frame (a third of a window at step 3);
2. the batcher hands consecutive uploads, up to ``--max-batch`` windows of work, to
   :meth:`DevicePath.run` on the backend thread: one ``GpuPipeline.push`` decodes (nvJPEG on
   CUDA), resizes, windows, batches, runs and post-processes the frames of every session in
   them; rows go to each session's outbox in frame order, then the uploads' futures resolve;
3. a frame the pipeline refuses (it does not decode, or has another size) refuses its upload
   alone (400 ``not_an_image`` / 422 ``frame_size``); the other uploads are pushed again
   without it, so other sessions are never disturbed.

Sessions with ``dedup_ssim`` (the SSIM filter needs host pixels), ``/v1/track`` and ``/v2``
keep the host path (:class:`~.sessions.Feeder`, windows in the same batcher). PNG and raw RGB
frames of a device session get 415.

With ``--pipeline-lanes N`` the worker holds N such pipelines (:class:`DeviceLanes`), each
with its own backend, CUDA stream and backend thread (a lane of the batcher). A session lives
in one lane, dealt to the one with the fewest open sessions; its uploads run on that lane's
thread, so the lanes' host work (decode calls, bookkeeping, the tracker) overlaps wherever it
leaves the interpreter lock, and their kernels share one CUDA context. On CUDA the lanes'
graphs are frozen once all are warm: a graph captured while another thread works fails.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from contextlib import nullcontext
from dataclasses import dataclass

import cv2
import numpy as np
import torch

from ttball.backends import Backend
from ttball.kernels import copies
from ttball.kernels.arrival import ArrivalDecoder, Decoded
from ttball.kernels.decode_process import DecoderProcess
from ttball.kernels.prepost import DeviceStream, FrameRejected, GpuPipeline, JpegDecoder
from ttball.kernels.prepost_timing import GPU_STAGES, StageTimer
from ttball.model.config import WeightsConfig
from ttball.results import FrameResult
from ttball.serve.batcher import WINDOW, Batcher
from ttball.serve.metrics import Metrics
from ttball.serve.push_profile import PushProfiler
from ttball.serve.sessions import Session
from ttball.serve.settings import ApiError, ServeSettings, resize_mode
from ttball.serve.uploads import PNG_MAGIC, Part, header_size
from ttball.stream import StreamOptions

KIND = "device"  # the batcher's job kind of an Upload
# ttball_flush_seconds' stages: the flush thread's wait for the GPU before it takes the lock
# (--flush-thread), then the read-back's wait, its reading and the tracking; the GPU time of
# the calls it read back, from their timing events (GPU_STAGES: under a latency load the
# flushes, not the pushes, read every call back, so this is the only place those times reach);
# and the whole call on its thread (lock waits and delivery included) with that thread's CPU
# time in it: what a flush's hand-offs add is the batcher's ``idle`` stage less ``call``
FLUSH_STAGES = ("wait", "post_wait", "post_read", "track", *GPU_STAGES, "call", "call_cpu")
# --decode-ahead: /readyz's counts → ttball_decode_ahead's result label
AHEAD_RESULTS = {"decode_ahead_hits": "hit", "decode_ahead_misses": "miss"}
# a session's key in its pipeline: ``{id}#{n}``, n unique in the process (over every lane)
_KEYS = itertools.count()


class FrameRefused(ApiError):
    """A frame the pipeline refused (its upload is not taken; the session goes on)."""


@dataclass(frozen=True)
class Upload:
    """The frames of one request for one session, undecoded, or its ``finish``."""

    key: str  # the session's id in the pipeline (its DeviceStream's stream_id)
    blobs: tuple[bytes, ...]
    stamps: tuple[tuple[int, float], ...]  # (index, time_s) per frame
    deliver: Callable[[list[FrameResult]], None]  # rows to the session's outbox (any thread)
    finish: bool = False
    # --decode-on-arrival: its frames' decode, started as it was queued (None: the push decodes)
    decoded: Future[Decoded | None] | None = None


def make_decoder(device: torch.device, settings: ServeSettings,
                 wait: bool = True) -> JpegDecoder | DecoderProcess:
    """The settings' JPEG decoder on ``device``: in ``--decode-processes`` child processes
    (``wait=False``: started, not waited for; :meth:`DecoderProcess.wait_ready`), else in this
    process."""
    if settings.pipeline_decode_processes:
        return DecoderProcess(device, library=settings.pipeline_decoder,
                              processes=settings.pipeline_decode_processes, wait=wait)
    return JpegDecoder(device, library=settings.pipeline_decoder)


class DevicePath:
    """The worker's GpuPipeline: sessions open and close here; :meth:`run` (backend thread)
    is the batcher's runner of uploads."""

    def __init__(self, backend: Backend, config: WeightsConfig, settings: ServeSettings,
                 metrics: Metrics, executor: Executor,
                 decoder: JpegDecoder | DecoderProcess | None = None,
                 arrival: ArrivalDecoder | None = None) -> None:
        """``executor``: the backend thread (closing a session waits for a push in flight);
        ``decoder``: the settings' decoder, made already (default: made here); ``arrival``
        (``--decode-on-arrival``): another lane's arrival decoder, shared (default: made here)."""
        self.metrics, self._executor = metrics, executor
        if decoder is None:
            decoder = make_decoder(backend.device, settings)
        self.pipeline = GpuPipeline(backend, config, decoder=decoder,
                                    batch_sizes=settings.warmup_batches,
                                    max_batch=settings.batch_limit, on_batch=metrics.note_batch,
                                    overlap=settings.pipeline_overlap,
                                    depth=settings.pipeline_depth,
                                    stats_stream=settings.pipeline_stats_stream,
                                    resize=resize_mode(settings.pipeline_resize,
                                                       backend.device.type),
                                    decode_early=settings.pipeline_decode_early,
                                    carry=settings.pipeline_carry)
        self.config = config
        metrics.watch_device()
        # backend thread: each open session's delivery (with overlap, a push returns rows of
        # sessions that are not among its uploads)
        self._sinks: dict[str, Callable[[list[FrameResult]], None]] = {}
        # overlap: uploads whose batches are in flight, each with the pipeline's count of
        # launched pushes after its own (after the next one when --carry-windows left some of
        # its session's windows to it) and its session's key; each resolves once pushes_done
        # reaches its count, or its session is closed
        self._waiting: list[tuple[int, str, Future[None]]] = []
        self._ahead = settings.pipeline_decode_ahead  # run() is told the upcoming uploads
        # --flush-thread: flush() runs on a thread of its own (the batcher's), waiting for the
        # GPU outside the pipeline's lock while the next push decodes; its stages' time kept
        # apart from the pushes' (not exported)
        self.flush_thread = settings.pipeline_flush_thread
        self.flush_after_push = settings.pipeline_flush_after_push  # (the batcher's to run)
        self._flush_timer = StageTimer(backend.device) if self.flush_thread else None
        # --decode-on-arrival: the arrival decoder (made at start-up only with the option; one
        # thread, nvJPEG handle and stream for all of a worker's lanes: a first build with one a
        # lane, its batches back to back, hung two replicas of six with the GPU idle in the
        # fifty-seventh session, docs/benchmarks/LOG.md), and whether uploads are sent to it
        # now (PUT /v1/admin/settings may switch it)
        if arrival is None and settings.pipeline_decode_on_arrival:
            arrival = ArrivalDecoder(backend.device, name="decode-arrival",
                                     on_batch=metrics.note_arrival_batch)
        self.arrival = arrival
        self.decode_on_arrival = self.arrival is not None
        self._heatmaps_seen = self._fallbacks_seen = 0  # the pipeline's counts exported so far
        self._profiler = PushProfiler.from_env()  # TTBALL_PROFILE_PUSHES (measurement only)

    def describe(self) -> dict[str, object]:
        decoder = self.pipeline.decoder
        resizer = self.pipeline.resizer
        normalize, normalize_error = self.pipeline.normalizing
        return {"decoder": decoder.kind, "decoder_note": decoder.gpu_reason,
                "decoder_processes": (decoder.processes if isinstance(decoder, DecoderProcess)
                                      else 0),
                "decoder_start": (decoder.start_seconds() if isinstance(decoder, DecoderProcess)
                                  else None),
                "decode_ahead": self._ahead, "decode_early": self.pipeline.decode_early,
                "carry_windows": self.pipeline.carry, "flush_thread": self.flush_thread,
                "flush_after_push": self.flush_after_push,
                "decode_on_arrival": self.decode_on_arrival,
                "arrival_decoder": self.arrival.kind if self.arrival is not None else None,
                "arrival_decoder_note": (self.arrival.gpu_reason if self.arrival is not None
                                         else None),
                "graph_error": self.pipeline.graph_error, "overlap": self.pipeline.overlap,
                "depth": self.pipeline.depth, "stats_stream": self.pipeline.stats_stream,
                "resize": resizer.running, "compile_resize": resizer.compiled,
                "compile_resize_error": resizer.compile_error,
                "normalize": normalize, "normalize_error": normalize_error,
                "kernel_copies": copies.kernel_copies(),
                "fused_windows": self.pipeline.fused_windows}

    def ahead_counts(self) -> dict[str, int]:
        """``--decode-ahead``: prefetched decodes taken and dropped, this lane's."""
        decoder = self.pipeline.decoder
        if not (self._ahead and isinstance(decoder, DecoderProcess)):
            return {}
        return {"decode_ahead_hits": decoder.ahead_hits,
                "decode_ahead_misses": decoder.ahead_misses}

    def start_decode(self, blobs: Sequence[bytes]) -> Future[Decoded | None] | None:
        """``--decode-on-arrival`` (event loop): start decoding an upload's frames now; None
        when it is off (the push decodes them)."""
        if self.arrival is None or not self.decode_on_arrival:
            return None
        return self.arrival.submit(blobs)

    def close_arrival(self) -> None:
        """Stop the arrival decoder's thread (worker shutdown) once what it was sent is
        decoded; uploads queued later are decoded by their pushes."""
        if self.arrival is not None:
            self.arrival.close(timeout=1.0)

    # -- sessions (event loop) ---------------------------------------------------------------------
    def open(self, sid: str, options: StreamOptions, fps: float) -> DeviceStream:
        """A session's stream in the pipeline, under a key of its own (a session removed and
        opened again under the same id, as a Ray replica resumes it, never meets its old self)."""
        return self.pipeline.open(f"{sid}#{next(_KEYS)}", options, fps)

    def close(self, key: str) -> None:
        """Drop a session on the backend thread, after any push in flight."""
        try:
            self._executor.submit(self._close, key)
        except RuntimeError:  # the backend thread is shut down: so is the pipeline
            pass

    def _close(self, key: str) -> None:
        with self.pipeline.lock:
            self.pipeline.close(key)
            self._sinks.pop(key, None)
            # its uploads' rows will not be delivered: they need not wait for the pushes (a
            # window carried for it is gone with it, and no push may come to resolve them)
            for _, _, later in [w for w in self._waiting if w[1] == key]:
                later.set_result(None)
            self._waiting = [w for w in self._waiting if w[1] != key]

    # -- the backend thread ------------------------------------------------------------------------
    def warm(self, sizes: Sequence[int]) -> None:
        """Run a push of ``b`` windows for every batch size ``b`` (decoder, resize tables and,
        on CUDA, the post-processing graph of each size), after compiling the resize's graphs
        (:meth:`~ttball.kernels.prepost_image.Resizer.warm`), so a ready worker never captures
        or compiles."""
        h, w = self.config.input_size
        blanks = [cv2.imencode(".jpg", np.full((2 * h, 2 * w, 3), v, np.uint8))[1].tobytes()
                  for v in (0, 64, 128)]  # three distinct frames: one step-3 window
        report, self.pipeline.on_batch = self.pipeline.on_batch, None  # not counted as work
        self.pipeline.resizer.warm(self.pipeline.device)
        try:
            for size in sorted(sizes):
                keys = [f"warm-{size}-{k}" for k in range(size)]
                for key in keys:
                    self.pipeline.open(key)
                self.pipeline.push([(key, blank) for blank in blanks for key in keys])
                self.pipeline.flush()
                for key in keys:
                    self.pipeline.close(key)
        finally:
            self.pipeline.on_batch = report
            # the warm-up's heatmaps are not work either
            self._heatmaps_seen, self._fallbacks_seen = (self.pipeline.heatmaps,
                                                         self.pipeline.fallbacks)

    def run(self, uploads: list[Upload], upcoming: Sequence[Upload] = ()
            ) -> list[ApiError | Future[None] | None]:
        """Every upload's frames in one push, then the finishes; one result per upload
        (``None``, or the refusal of its frames). Uploads of sessions closed meanwhile are
        skipped. ``upcoming`` (``--decode-ahead``): the uploads queued after these, whose
        frames' decode the push starts once its own are decoded.

        With ``--pipeline-overlap`` an upload whose frames are still on the GPU when the push
        returns gets a :class:`concurrent.futures.Future` instead of ``None``; it resolves once
        those frames' rows are delivered (by the next push, a finish or :meth:`flush`), so a
        step still ends with its rows in the outbox."""
        results: list[ApiError | Future[None] | None] = [None] * len(uploads)
        lock = self.pipeline.lock  # (held by the push itself from its decode's end)
        with lock:
            live = [i for i, u in enumerate(uploads) if u.key in self.pipeline]
            for i in live:
                self._sinks[uploads[i].key] = uploads[i].deliver
        try:
            ahead = [(u.key, blob) for u in upcoming if u.key in self.pipeline
                     for blob in u.blobs]
            pushed = self._push(uploads, live, results, ahead)
            with lock:
                for i in live:
                    if uploads[i].finish:
                        uploads[i].deliver(self.pipeline.finish(uploads[i].key))
                        self._sinks.pop(uploads[i].key, None)
                self._deliver(self.pipeline.take_ready())  # rows a finish read back for others
                self._count_heatmaps()  # those a finish read back
        except BaseException as exc:
            with lock:
                self._release(exc)
            raise
        if not self.pipeline.overlap:
            return results
        with lock:
            if self.pipeline.in_flight and pushed:
                carried = self.pipeline.carried_sessions
                for i in live:
                    if not uploads[i].finish and results[i] is None:
                        later: Future[None] = Future()
                        results[i] = later
                        key = uploads[i].key
                        self._waiting.append(
                            (self.pipeline.pushes_launched + (key in carried), key, later))
            # the uploads whose pushes' batches have been read back (with --flush-thread,
            # perhaps this push's own already, by a flush since it let go of the lock)
            self._release()
        return results

    def flush(self) -> None:
        """Backend thread, when the queue runs short (``--pipeline-overlap``): the rows of the
        batches the last push left running, to their sessions; then their uploads resolve.
        With ``--flush-thread`` on a thread of its own: it waits for the GPU first, outside
        the pipeline's lock, so a push may decode meanwhile, and reads back only what it
        waited for (a push launched meanwhile has a flush of its own after it)."""
        lock = self.pipeline.lock
        timer = self._flush_timer or self.pipeline.timer
        before = dict(timer.seconds)
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            waited = None
            if self.flush_thread:  # (its own timer: the pushes' never gets a "wait" stage)
                waited = self.pipeline.wait_in_flight()
                timer.seconds["wait"] += time.perf_counter() - start
            with lock:
                if self.pipeline.in_flight:
                    self._deliver(self.pipeline.flush(self._flush_timer, waited))
                    self._count_heatmaps()
        except BaseException as exc:
            with lock:
                self._release(exc)
            raise
        with lock:
            self._release()
        self._count_flush(timer, before, time.perf_counter() - start, time.thread_time() - cpu)

    def _release(self, error: BaseException | None = None) -> None:
        """Resolve the uploads whose pushes' batches have been read back; with ``error``, fail
        every upload waiting."""
        done = self.pipeline.pushes_done
        waiting, self._waiting = self._waiting, []
        for target, key, later in waiting:
            if error is None and target > done:
                self._waiting.append((target, key, later))
            elif error is None:
                later.set_result(None)
            else:  # as the batcher answers a failed run
                later.set_exception(ApiError(500, "backend_error", f"{type(error).__name__}: {error}"))

    def _deliver(self, rows: dict[str, list[FrameResult]]) -> None:
        for key, done in rows.items():
            sink = self._sinks.get(key)
            if done and sink is not None:
                sink(done)

    def _push(self, uploads: list[Upload], live: list[int],
              results: list[ApiError | Future[None] | None],
              upcoming: Sequence[tuple[str, bytes]] = ()) -> bool:
        """Push the frames of ``uploads[live]``; a refused frame's upload is dropped from the
        push (its result says why) and the rest pushed again (nothing changed on a refusal).
        Whether a push happened."""
        while True:
            owner = [i for i in live for _ in uploads[i].blobs]
            if not owner:
                return False
            frames = [(uploads[i].key, blob) for i in live for blob in uploads[i].blobs]
            stamps = [stamp for i in live for stamp in uploads[i].stamps]
            decoded = self._arrived([uploads[i] for i in live])
            try:
                self._timed_push(frames, stamps, upcoming, decoded)  # its rows delivered in it
            except FrameRejected as exc:
                bad = owner[exc.index]
                results[bad] = _refusal(exc, uploads[bad].stamps[exc.index - owner.index(bad)][0])
                live.remove(bad)
                continue
            self.metrics.frame_accepted(len(frames))
            if self.arrival is not None:
                self._count_arrived(decoded)
            return True

    def _arrived(self, uploads: Sequence[Upload]) -> list[Decoded | None]:
        """``--decode-on-arrival``: the uploads' decoded frames for :meth:`GpuPipeline.push`
        (a :class:`Decoded` an upload; None a frame the push decodes), waited for in the
        ``arrival_wait`` stage; empty without an arrival decoder."""
        if self.arrival is None:
            return []
        out: list[Decoded | None] = []
        with self.pipeline.timer.stage("arrival_wait"):
            for upload in uploads:
                got = upload.decoded.result() if upload.decoded is not None else None
                out.extend([got] if got is not None else [None] * len(upload.blobs))
        return out

    def _count_arrived(self, decoded: Sequence[Decoded | None]) -> None:
        """``ttball_arrival_frames``: a push's frames by where they were decoded (on arrival;
        by the push: queued while switched off, or an upload with a frame that did not decode)."""
        counter = self.metrics.arrival_frames
        assert counter is not None
        early = sum(len(d.images) for d in decoded if d is not None)
        counter.labels("arrival").inc(early)
        counter.labels("push").inc(sum(d is None for d in decoded))

    def _deliver_pushed(self, rows: dict[str, list[FrameResult]]) -> None:
        """A push's rows, delivered under the pipeline's lock (so a flush on another thread
        never hands on later rows first), with the heatmaps read back since the last count."""
        self._deliver(rows)
        self._count_heatmaps()

    def _count_flush(self, timer: StageTimer, before: dict[str, float], call: float,
                     call_cpu: float) -> None:
        """``ttball_flush_seconds``: a flush's :data:`FLUSH_STAGES` from ``timer`` (the flush
        thread's own, or the pipeline's: no push runs during a flush on the lane's thread),
        and the whole call's wall and CPU seconds."""
        assert self.metrics.flush_seconds is not None
        whole = {"call": call, "call_cpu": call_cpu}
        for stage in FLUSH_STAGES:
            self.metrics.flush_seconds.labels(stage).inc(
                whole[stage] if stage in whole
                else max(0.0, timer.seconds.get(stage, 0.0) - before.get(stage, 0.0)))

    def _count_heatmaps(self) -> None:
        """``ttball_heatmaps``: the heatmaps the pipeline read back since the last count, by
        where they were post-processed (under the pipeline's lock: a push's and a flush's)."""
        assert self.metrics.heatmaps is not None
        pipeline = self.pipeline
        host = pipeline.fallbacks - self._fallbacks_seen
        self.metrics.heatmaps.labels("device").inc(pipeline.heatmaps - self._heatmaps_seen - host)
        self.metrics.heatmaps.labels("host").inc(host)
        self._heatmaps_seen, self._fallbacks_seen = pipeline.heatmaps, pipeline.fallbacks

    def _timed_push(self, frames: list[tuple[str, bytes]], stamps: list[tuple[int, float]],
                    upcoming: Sequence[tuple[str, bytes]] = (),
                    decoded: Sequence[Decoded | None] = ()) -> dict[str, list[FrameResult]]:
        pipeline = self.pipeline
        before = dict(pipeline.timer.seconds)
        before_cpu = dict(pipeline.timer.cpu_seconds)
        ahead = self.ahead_counts()
        carried = pipeline.windows_carried
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            with self._profiler.push() if self._profiler is not None else nullcontext():
                rows = pipeline.push(frames, stamps, upcoming, deliver=self._deliver_pushed,
                                     decoded=decoded)
        finally:
            counter = self.metrics.decode_ahead
            assert counter is not None
            for key, n in self.ahead_counts().items():
                counter.labels(AHEAD_RESULTS[key]).inc(n - ahead[key])
        seconds = self.metrics.push_seconds
        assert seconds is not None and self.metrics.push_frames and self.metrics.heatmaps
        seconds.labels("total").observe(time.perf_counter() - start)
        for stage, total in pipeline.timer.seconds.items():
            seconds.labels(stage).observe(total - before.get(stage, 0.0))
        on_cpu = self.metrics.push_cpu_seconds
        assert on_cpu is not None
        on_cpu.labels("total").inc(max(0.0, time.thread_time() - cpu))
        for stage, total in pipeline.timer.cpu_seconds.items():
            on_cpu.labels(stage).inc(max(0.0, total - before_cpu.get(stage, 0.0)))
        self.metrics.push_frames.observe(len(frames))
        assert self.metrics.windows_carried is not None
        self.metrics.windows_carried.inc(pipeline.windows_carried - carried)
        return rows


class DeviceLanes:
    """The worker's pipelines, one :class:`DevicePath` a lane (``--pipeline-lanes``; one lane
    without it). The session store and the routes see one object: a session opens in the lane
    with the fewest open sessions and stays there; :meth:`lane_of` says which, for its uploads."""

    def __init__(self, first: DevicePath) -> None:
        self.paths = [first]
        self._lane_of: dict[str, int] = {}  # open session's key → lane
        self.frozen = False

    def add(self, path: DevicePath) -> int:
        """Another lane's path (built and warmed on its own backend thread); its index."""
        self.paths.append(path)
        return len(self.paths) - 1

    @property
    def lane_sessions(self) -> list[int]:
        """Open sessions a lane."""
        counts = [0] * len(self.paths)
        for lane in self._lane_of.values():
            counts[lane] += 1
        return counts

    @property
    def pipeline(self) -> GpuPipeline:
        """Lane 0's pipeline (every lane's has the same decoder and settings)."""
        return self.paths[0].pipeline

    def describe(self) -> dict[str, object]:
        counts: dict[str, int] = {}  # decode ahead, over every lane
        for path in self.paths:
            for key, n in path.ahead_counts().items():
                counts[key] = counts.get(key, 0) + n
        return {**self.paths[0].describe(), **counts, "lanes": len(self.paths),
                "lane_sessions": self.lane_sessions, "graphs_frozen": self.frozen,
                "uncaptured_calls": self.uncaptured}

    def freeze_graphs(self) -> None:
        """No CUDA graph captured from now on in any lane (what has none runs eagerly): with
        several lanes, a capture while another lane's thread works fails."""
        for path in self.paths:
            path.pipeline.freeze_graphs()
        self.frozen = True

    @property
    def uncaptured(self) -> int:
        """Calls of every lane that ran without a graph since their graphs were frozen."""
        return sum(path.pipeline.uncaptured for path in self.paths)

    # -- sessions (event loop) ---------------------------------------------------------------------
    def open(self, sid: str, options: StreamOptions, fps: float) -> DeviceStream:
        counts = self.lane_sessions
        lane = counts.index(min(counts))
        stream = self.paths[lane].open(sid, options, fps)
        self._lane_of[stream.stream_id] = lane
        return stream

    def lane_of(self, key: str) -> int:
        """The lane of the session ``key`` (0 for one this object never opened)."""
        return self._lane_of.get(key, 0)

    def close(self, key: str) -> None:
        lane = self._lane_of.pop(key, None)
        if lane is not None:
            self.paths[lane].close(key)


def _refusal(exc: FrameRejected, frame: int) -> FrameRefused:
    if exc.reason == "size":
        return FrameRefused(422, "frame_size", f"frame {frame}: {exc.detail}", frame=frame)
    return FrameRefused(400, "not_an_image",
                        f"frame {frame} could not be decoded (corrupt JPEG?)", frame=frame)


class DeviceFeeder:
    """The event-loop side of device sessions: frames checked from their headers and queued as
    uploads; each push or finish returns a *step* (a task) that ends once its rows are in the
    session's outbox, as :class:`~.sessions.Feeder`'s steps do."""

    def __init__(self, batcher: Batcher, settings: ServeSettings,
                 lanes: DeviceLanes | None = None) -> None:
        """``lanes``: which lane of ``batcher`` each session's uploads go to (None: lane 0)."""
        self.batcher, self.settings, self.lanes = batcher, settings, lanes

    def _lane(self, session: Session) -> int:
        return 0 if self.lanes is None else self.lanes.lane_of(session.stream.stream_id)

    def push(self, session: Session, parts: list[Part], frame: int | None = None,
             t: float | None = None) -> asyncio.Task[None]:
        """Queue ``parts`` (JPEG frames) as one upload: all of them are taken, or none.
        4xx now for what the headers show (not a JPEG, too large, other size, frame order),
        429 when the queue is full; the step raises :class:`FrameRefused` for a frame that does
        not decode."""
        session.check_usable()
        session.touch()
        stamps = session.stamps([self._jpeg_size(p) for p in parts], frame, t)
        cost = len(parts) * (WINDOW // session.options.step)
        self.batcher.reserve(1, cost)
        lane = self._lane(session)
        blobs = tuple(p.data for p in parts)
        decoded = self.lanes.paths[lane].start_decode(blobs) if self.lanes is not None else None
        upload = Upload(session.stream.stream_id, blobs, tuple(stamps), session.deliver,
                        decoded=decoded)
        future = self.batcher.submit_job(KIND, upload, cost, lane=lane)
        session.last_index = stamps[-1][0]
        return self._step(session, future, stamps[0][0], stamps[-1][0])

    def finish(self, session: Session) -> asyncio.Task[None]:
        """No more frames: the step leaves every row in the outbox; the pipeline closes it."""
        session.check_usable()
        self.batcher.reserve(1)
        session.finished = True
        upload = Upload(session.stream.stream_id, (), (), session.deliver, finish=True)
        future = self.batcher.submit_job(KIND, upload, lane=self._lane(session))
        return self._step(session, future, None, None)

    def _jpeg_size(self, part: Part) -> tuple[int, int]:
        if part.raw_size is not None or part.data.startswith(PNG_MAGIC):
            kind = "raw RGB" if part.raw_size is not None else "PNG"
            raise ApiError(415, "unsupported_media_type",
                           f"{kind} frames are not taken by this worker's device pipeline "
                           "(--device-pipeline): send JPEG, or open the session with dedup_ssim "
                           "to use the host path")
        return header_size(part, self.settings)

    def _step(self, session: Session, future: asyncio.Future[None], first: int | None,
              last: int | None) -> asyncio.Task[None]:
        step = asyncio.get_running_loop().create_task(
            self._settle(session, session.tail, future, first, last))
        session.tail = step
        return step

    @staticmethod
    async def _settle(session: Session, previous: asyncio.Task[None] | None,
                      future: asyncio.Future[None], first: int | None, last: int | None) -> None:
        """Wait for the previous step (so removing a session cancels all of its queued uploads)
        and this one's upload. A refused HTTP upload gives its frame numbers back (nothing later
        was queued); a WebSocket's stay used, as on the host path."""
        try:
            if previous is not None:
                try:
                    await previous
                except FrameRefused:
                    pass
            await future
        except asyncio.CancelledError:
            future.cancel()
            raise
        except FrameRefused:
            if not session.attached and first is not None and session.last_index == last:
                session.last_index = first - 1
            raise
        except ApiError as exc:
            session.failed = session.failed or exc.message
            raise

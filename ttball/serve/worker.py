"""The worker's backend side before and around batching (:class:`Worker`): start-up and warm-up,
readiness, and the parts the routes use once ready.

Start-up runs in a background thread once the server listens, so ``/healthz`` answers from the
first second: load the weights, choose the backend (``--backend auto``), build it (with
``--compile-cache``), set up the device pipeline, warm every configured batch size (which
compiles them), optionally verify; only then is the worker ready, and the batcher
(:mod:`ttball.serve.batcher`) starts.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ttball import __version__
from ttball.backends import resolve_device
from ttball.cachedir import use_compile_cache
from ttball.errors import UserError
from ttball.kernels.records import RECORD
from ttball.model.config import WeightsConfig
from ttball.serve.batcher import Batcher
from ttball.serve.metrics import Metrics
from ttball.serve.settings import AUTO, MPS_PERCENT_ENV, ApiError, ServeSettings
from ttball.threadnames import name_os_thread

if TYPE_CHECKING:
    from ttball.serve.device import DeviceLanes, DevicePath
    from ttball.serve.sessions import Feeder, SessionStore


log = logging.getLogger(__name__)

CUDA_WARM_CALLS = 3
# --live-settings: what PUT /v1/admin/settings may change while serving, name -> (type, low,
# high): read by the batcher or the interpreter at each use, so a change holds from the next
# batch on (a measurement's A/B under one start: docs/serve.md)
LIVE_SETTINGS: dict[str, tuple[type, float, float]] = {
    "flush_after_push": (bool, 0.0, 0.0), "decode_on_arrival": (bool, 0.0, 0.0),
    "max_delay_ms": (float, 0.0, 1000.0),
    "switch_interval_ms": (float, 0.01, 100.0)}


def gpu_share(device: object, sched_note: str | None = None) -> dict[str, Any] | None:
    """What of its GPU this process may use: the multiprocessors CUDA reports for the
    backend's device (under CUDA MPS with an active-thread percentage only the capped share:
    66 of an H200's 132 at 50 %; None before the backend holds a CUDA device, and CUDA is
    never initialized here), the percentage its environment asks for, and how its threads
    wait for the GPU (``sched``: ``auto``, ``spin``, ``yield`` or ``blocking_sync``; with
    ``sched_note``, why ``--cuda-blocking-sync`` was not applied). None if none of it."""
    import torch

    cap = os.environ.get(MPS_PERCENT_ENV) or None
    sms = sched = None
    if device is not None and torch.device(str(device)).type == "cuda" and torch.cuda.is_initialized():
        index = torch.device(str(device)).index or 0
        sms = torch.cuda.get_device_properties(index).multi_processor_count
        from ttball.cudasched import primary_context

        state = primary_context(index)
        sched = state[0] if state else None
    if sms is None and cap is None:
        return None
    return {"multiprocessors": sms,
            "mps_active_thread_percentage": int(cap) if cap and cap.isdigit() else cap,
            "sched": sched, "sched_note": sched_note}


def _inductor_cache() -> Path:
    """torch.compile's inductor cache folder ($TORCHINDUCTOR_CACHE_DIR, else torch's default)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        return Path(cache_dir())
    except ImportError:  # (a private module: its place may change)
        import getpass
        import tempfile

        return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR")
                    or Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}")


def _ready(decoder: Any) -> Any:
    """``decoder`` (a started :class:`~ttball.kernels.decode_process.DecoderProcess`, or
    ``None``) once its children have answered."""
    if decoder is not None:
        decoder.wait_ready()
    return decoder


class Finishing:
    """How many WebSocket sessions are between their ``finish`` message and their ``end``.
    Shutdown waits for them (:func:`ttball.serve.app.draining_server`) before uvicorn closes
    every WebSocket with 1012: a session that has sent ``finish`` gets its last rows."""

    def __init__(self) -> None:
        self.count = 0

    @contextmanager
    def hold(self) -> Iterator[None]:
        self.count += 1
        try:
            yield
        finally:
            self.count -= 1

    async def wait(self, timeout: float) -> int:
        """Until none is finishing or ``timeout`` seconds passed; how many still are."""
        deadline = time.monotonic() + timeout
        while self.count and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.count


class Worker:
    """Start-up progress and, once ready, the parts the routes use."""

    def __init__(self, settings: ServeSettings, metrics: Metrics) -> None:
        self.settings, self.metrics = settings, metrics
        if settings.switch_interval_ms is not None:  # the whole process's, from now on
            sys.setswitchinterval(settings.switch_interval_ms / 1e3)
        self.phase = "starting"
        self.error: str | None = None
        # called (on the start-up thread) when start-up fails: `ttball serve` stops its server
        # then, so a supervisor sees the process exit instead of one that is never ready
        self.on_failed: Callable[[], None] | None = None
        self.started = time.monotonic()
        self.seconds: dict[str, float] = {}
        self.warmup_s: dict[int, float] = {}
        self.backend: Any = None
        self.model: Any = None
        self.config: WeightsConfig | None = None
        self.batcher: Batcher | None = None
        self.device: DeviceLanes | None = None  # --device-pipeline
        self.feeder: Feeder | None = None
        self.store: SessionStore | None = None
        self.verification: Any = None
        self.choice: Any = None  # --backend auto: ttball.backends.auto.Choice
        # torch's CPU thread pool: one thread on the decode threads, which parallelise by their
        # number. With torch's default (one per core) every small torch op there wakes a whole
        # OpenMP team, and the spinning teams starve the event loop and the backend thread: with a
        # 1.5 ms fake backend on the 2-core machine the network stage took 24 ms per batch
        # instead of 6.0 ms, and p50 latency 110 ms instead of 42 ms
        # (docs/benchmarks/serve-h200.md).
        self.pool = ThreadPoolExecutor(settings.decode_threads, thread_name_prefix="ttball-decode",
                                       initializer=_pool_thread, initargs=(1,))
        # Everything that touches the backend (build, warm-up, verify, batches) runs on this one
        # thread: CUDA graphs recorded by torch.compile belong to the thread that recorded them,
        # and oneDNN's thread count (--torch-threads) is per thread: the given count, else one for
        # a GPU backend (its CPU work is a few small ops) and torch's default for a CPU one.
        threads = settings.torch_threads or (
            1 if resolve_device(settings.device).type == "cuda" else torch.get_num_threads())
        self.backend_thread = ThreadPoolExecutor(
            1, thread_name_prefix="ttball-backend",
            initializer=_pool_thread, initargs=(threads,))
        self._torch_threads = threads
        self.lane_threads: list[ThreadPoolExecutor] = []  # --pipeline-lanes: lanes 1, 2, ...
        self.flush_threads: list[ThreadPoolExecutor] = []  # --flush-thread: one a lane
        self.finishing = Finishing()  # WebSocket sessions between their finish and their end
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._loop_watch: asyncio.Task[None] | None = None  # ttball_event_loop_lag_seconds
        self._abort = threading.Event()
        self.sched_note: str | None = None  # why --cuda-blocking-sync was not applied
        self._gpu: dict[str, Any] | None = None  # gpu_share, kept once the worker is ready

    # -- start-up ---------------------------------------------------------------------------------
    @asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        self._loop = asyncio.get_running_loop()
        self._loop.run_in_executor(self.backend_thread, self._start_up)  # not awaited
        try:
            yield
        finally:
            await self.shut_down()

    def _start_up(self) -> None:
        try:
            self._load_and_warm()
        except Exception as exc:  # noqa: BLE001  (reported by /readyz and the log, never ready)
            # a UserError's message says what to change; anything else needs its kind
            self.error = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
            self.phase = "failed"
            print(f"ttball serve: start-up failed: {self.error}", file=sys.stderr, flush=True)
            if self.on_failed is not None:
                self.on_failed()
            return
        if self._abort.is_set() or self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(self._go_live)
        except RuntimeError:  # the loop closed while we warmed up
            pass

    @property
    def weights_config(self) -> WeightsConfig:
        """The loaded weights' configuration (start-up's first phase sets it)."""
        if self.config is None:
            raise RuntimeError("the weights are not loaded yet")
        return self.config

    def _timed(self, phase: str, fn: Callable[[], Any]) -> Any:
        if self._abort.is_set():
            raise RuntimeError("shutting down during start-up")
        self.phase = phase
        start = time.perf_counter()
        out = fn()
        self._note_seconds(phase, time.perf_counter() - start)
        return out

    def _note_seconds(self, phase: str, seconds: float) -> None:
        """A start-up phase's seconds, for /readyz and ttball_startup_seconds."""
        self.seconds[phase] = seconds
        self.metrics.startup_seconds.labels(phase).set(seconds)

    def _load_and_warm(self) -> None:
        from ttball.model import load_model

        s = self.settings
        if s.cuda_blocking_sync:  # before anything creates the CUDA context
            from ttball.cudasched import request_blocking_sync

            self.sched_note = request_blocking_sync()
            if self.sched_note:
                print(f"ttball serve: --cuda-blocking-sync not applied: {self.sched_note}",
                      flush=True)
        self.model = self._timed("load", lambda: load_model(s.weights, device="cpu"))
        self.config = self.model.config
        cache = self._compile_cache()
        if cache is not None:  # before choosing too: the trials then fill the same caches
            use_compile_cache(cache)
        if s.backend == AUTO and s.backend_factory is None:
            self.choice = self._timed("choose", self._choose_backend)
        if s.pipeline_lanes > 1:  # lane 0 (this thread) on a CUDA stream of its own too
            _own_stream(resolve_device(s.device))
        self.backend = self._timed("build", self._build_backend)
        # --decode-processes: lane 0's decode children start now and are waited for in the
        # pipeline phase, after the network's warm-up: their start (spawn, import torch, open
        # CUDA and the decoder) took ~25 s of a replica's ~37 with eight replicas starting on
        # 16 cores (forty-second session), the warm-up 6-24 s, one after the other
        decoder = self._start_decoder()
        try:
            self._timed("warmup", self._warm)
            if s.device_pipeline:
                from ttball.serve.device import DeviceLanes, DevicePath

                # its own phase: the decoder (waited for here) and the pipeline's set-up
                self.device = self._timed("pipeline", lambda: DeviceLanes(DevicePath(
                    self.backend, self.weights_config, s, self.metrics, self.backend_thread,
                    decoder=_ready(decoder))))
        except BaseException:
            if decoder is not None and self.device is None:
                decoder.close()
            raise
        if self.device is not None:
            self._timed("pipeline_warmup", self._warm_pipeline)
        if s.verify:
            self._timed("verify", self._verify)
        if self.device is not None and (s.pipeline_lanes > 1 or s.pipeline_flush_thread):
            # from here on lanes (or a lane and its flush thread) run at once, and a capture
            # while another thread works fails
            self.device.freeze_graphs()

    def _compile_cache(self) -> Path | None:
        """``--compile-cache`` as an absolute path (None: not given)."""
        if not self.settings.compile_cache:
            return None
        return Path(self.settings.compile_cache).expanduser().resolve()

    def _choose_backend(self) -> Any:
        """``--backend auto``: the fastest backend that passes verification on this machine,
        chosen once and cached per machine and weights, as ``ttball track`` does."""
        from ttball.backends.auto import choose_backend

        return choose_backend(self.model, resolve_device(self.settings.device),
                              log=lambda msg: print(f"ttball serve: {msg}", flush=True),
                              cache_dir=self._compile_cache(),
                              clips=self.settings.auto_clips or None)

    def _build_backend(self) -> Any:
        from ttball.backends import create
        from ttball.backends.base import cache_options

        s = self.settings
        name = self.choice.backend if self.choice is not None else s.backend
        device = resolve_device(s.device)
        if s.backend_factory is not None:
            backend = s.backend_factory(self.model, device)
        else:
            backend = create(name, self.model, device, **cache_options(name, self._compile_cache()))
        if device.type == "cuda":
            self.metrics.watch_cuda(device)
        self.metrics.info.info({"backend": str(getattr(backend, "name", name)),
                                "device": str(device), "weights": str(self.weights_config.name),
                                "version": __version__})
        return backend

    def _start_decoder(self) -> Any:
        """Lane 0's decode children (``--device-pipeline --decode-processes N``), started and
        not waited for (``None`` without them)."""
        s = self.settings
        if not (s.device_pipeline and s.pipeline_decode_processes):
            return None
        from ttball.serve.device import make_decoder

        return make_decoder(self.backend.device, s, wait=False)

    def _warm(self) -> None:
        """Run every batch size: the first call compiles. On CUDA two more calls follow, as
        torch.compile's CUDA graphs are recorded on the second call and replayed from the third;
        the reported time is the first call's."""
        for size, seconds in self._warm_sizes(self.backend):
            self.warmup_s[size] = seconds
            self.metrics.warmup_seconds.labels(str(size)).set(seconds)

    def _warm_pipeline(self) -> None:
        """The device pipeline: a push of every size (its decoder and post-processing graphs),
        then the other lanes, each built and warmed on its own thread."""
        assert self.device is not None
        with self._compiling_alone():
            self.device.paths[0].warm(self.settings.warmup_batches)
        for lane in range(1, self.settings.pipeline_lanes):
            if self._abort.is_set():
                raise RuntimeError("shutting down during warm-up")
            thread = ThreadPoolExecutor(1, thread_name_prefix=f"ttball-backend-{lane}",
                                        initializer=_lane_thread,
                                        initargs=(self._torch_threads, self.backend.device))
            self.lane_threads.append(thread)
            self.device.add(thread.submit(self._build_lane, thread).result())

    def _flush_thread(self, lane: int) -> ThreadPoolExecutor | None:
        """``--flush-thread``: lane ``lane``'s flush thread (None without), shut down with the
        lanes' threads."""
        if not self.settings.pipeline_flush_thread:
            return None
        thread = ThreadPoolExecutor(1, thread_name_prefix=f"ttball-flush-{lane}",
                                    initializer=_lane_thread,
                                    initargs=(self._torch_threads, self.backend.device))
        self.flush_threads.append(thread)
        return thread

    def _compiling_alone(self) -> AbstractContextManager[bool]:
        """On CUDA, lane 0's pipeline warm-up compiles the resize (inductor) and the
        statistics' Triton kernels into caches the machine's processes share: eight replicas
        starting together compiled them all at once, 21-22 s of each cold start against 3.4-4.0
        with the caches warm (forty-second session). Now the first warms alone and the others
        wait, then warm with its compiles cached (:func:`ttball.filelock.first_alone`; its
        marker beside inductor's cache, keyed by what the compiles depend on)."""
        if self.backend.device.type != "cuda":
            return nullcontext(False)
        import hashlib
        import json

        from ttball.filelock import first_alone
        from ttball.kernels.prepost_post import FUSED_WINDOWS_ENV
        from ttball.kernels.records import source_digest

        s = self.settings
        key = json.dumps([torch.__version__, torch.cuda.get_device_name(self.backend.device),
                          source_digest(), list(s.warmup_batches), s.pipeline_resize,
                          os.environ.get(FUSED_WINDOWS_ENV, ""),
                          list(self.weights_config.input_size)])
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return first_alone(_inductor_cache() / "ttball" / f"pipeline-warm-{digest}")

    def _warm_sizes(self, backend: Any) -> Iterator[tuple[int, float]]:
        """Warm ``backend`` at every warm-up batch size (see :meth:`_warm`), yielding each
        size and its first call's seconds as it is done."""
        assert self.config is not None
        h, w = self.config.input_size
        calls = CUDA_WARM_CALLS if backend.device.type == "cuda" else 1
        for size in sorted(self.settings.warmup_batches):
            if self._abort.is_set():
                raise RuntimeError("shutting down during warm-up")
            seconds = backend.warmup([size], h, w)
            for _ in range(calls - 1):
                backend.warmup([size], h, w)
            yield size, float(seconds.get(size, 0.0))

    def _build_lane(self, thread: ThreadPoolExecutor) -> DevicePath:
        """On a lane's own thread: its backend, warmed as lane 0's, and its pipeline, warmed."""
        from ttball.serve.device import DevicePath

        assert self.config is not None
        backend = self._build_backend()
        for _ in self._warm_sizes(backend):
            pass
        assert self.device is not None
        # --decode-on-arrival: the lanes share lane 0's arrival decoder (ttball/serve/device.py)
        path = DevicePath(backend, self.config, self.settings, self.metrics, thread,
                          arrival=self.device.paths[0].arrival)
        path.warm(self.settings.warmup_batches)
        return path

    def _verify(self) -> None:
        """The warm backend against eager FP32 on the bundled reference clips (ttball.verify)."""
        import copy

        from ttball.backends import create

        try:
            from ttball.verify import bundled_reference_clips, verify_backend
        except ImportError as exc:
            raise RuntimeError(f"--verify needs ttball.verify, which is missing: {exc}") from None
        reference = create("eager-fp32", copy.deepcopy(self.model), self.backend.device)
        self.verification = verify_backend(self.backend, reference, bundled_reference_clips(),
                                           config=self.config)
        if not self.verification.passed:
            raise RuntimeError(f"verification failed: {self.verification.reason()}")

    def _go_live(self) -> None:
        from ttball.serve.device import KIND, DeviceFeeder
        from ttball.serve.sessions import Feeder, SessionStore

        s = self.settings
        paths = self.device.paths if self.device is not None else []
        runners = {KIND: paths[0].run} if paths else {}
        ahead = (KIND,) if s.pipeline_decode_ahead else ()  # DevicePath.run(uploads, upcoming)
        self.batcher = Batcher(self.backend, self.weights_config, self.metrics, sizes=s.warmup_batches,
                               max_batch=s.batch_limit, max_delay_s=s.max_delay_ms / 1000,
                               capacity=s.max_queue, executor=self.backend_thread,
                               runners=runners, lookahead=ahead,
                               batches_ahead=s.batches_ahead,
                               idle_after_batch=s.pipeline_flush_after_push)
        for lane, path in enumerate(paths):
            if lane:
                self.batcher.add_lane(self.lane_threads[lane - 1], {KIND: path.run},
                                      lookahead=ahead)
            if s.pipeline_overlap:
                self.batcher.set_idle(path.flush, self._flush_thread(lane), lane)
        self.batcher.start()
        self.store = SessionStore(self.weights_config, s, self.metrics, self.device)
        device = DeviceFeeder(self.batcher, s, self.device) if self.device is not None else None
        self.feeder = Feeder(self.batcher, self.pool, s, self.metrics, device)
        loop = asyncio.get_running_loop()
        if threading.current_thread() is not threading.main_thread():  # Ray's loop thread: named
            name_os_thread("tt-event-loop")  # (not the main one, whose name is the process's)
        self._reaper = loop.create_task(self.store.reap_forever())
        self._loop_watch = loop.create_task(self.metrics.watch_loop())
        self._note_seconds("total", time.monotonic() - self.started)
        self.metrics.ready.set(1)
        self.phase = "ready"
        lanes = f" in {len(paths)} lanes" if len(paths) > 1 else ""
        pipeline = (f", device pipeline{lanes} with {self.device.pipeline.decoder.kind} decode"
                    if self.device is not None else "")
        print(f"ttball serve: ready after {self.seconds['total']:.1f} s "
              f"({getattr(self.backend, 'name', s.backend)} on {self.backend.device}{pipeline}, "
              f"warm-up {_fmt_warm(self.warmup_s)}{_fmt_tuning(self._tuning())})", flush=True)

    async def shut_down(self) -> None:
        was_ready = self.phase == "ready"
        self.phase = "stopping"
        self.metrics.ready.set(0)
        for task in (self._reaper, self._loop_watch):
            if task is not None:
                task.cancel()
        self._abort.set()
        if was_ready and self.batcher is not None:
            await self.batcher.stop()
        for thread in (self.backend_thread, *self.lane_threads, *self.flush_threads):
            thread.shutdown(wait=False, cancel_futures=True)
        for path in self.device.paths if self.device is not None else []:
            path.close_arrival()
        self.pool.shutdown(wait=False, cancel_futures=True)

    # -- what routes ask -----------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.phase == "ready"

    def readiness(self) -> dict[str, Any]:
        sizes = sorted(self.settings.warmup_batches)
        return {
            "ready": self.ready,
            "phase": self.phase,
            "error": self.error,
            "backend": getattr(self.backend, "name", self.settings.backend),
            "device": str(getattr(self.backend, "device", self.settings.device)),
            "weights": getattr(self.config, "name", None),
            "warmup": {"batch_sizes": sizes, "done": sorted(self.warmup_s),
                       "pending": [b for b in sizes if b not in self.warmup_s],
                       "seconds": {str(b): round(t, 3) for b, t in self.warmup_s.items()},
                       "tuning": self._tuning()},
            "verified": getattr(self.verification, "passed", None),
            "auto": None if self.choice is None else {
                "chosen": self.choice.backend, "cached": self.choice.cached,
                "trials": [{"name": t.name, "status": t.status, "ms": t.ms, "reason": t.reason}
                           for t in self.choice.trials]},
            "device_pipeline": self.device.describe() if self.device is not None else None,
            "gpu": self._gpu_share(),
            "switch_interval_ms": round(sys.getswitchinterval() * 1e3, 3),
            "live_settings": self.live_values() if self.settings.live_settings else None,
            "event_loop": None if self._loop is None else type(self._loop).__module__.split(".")[0],
            "startup_seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "elapsed_s": round(time.monotonic() - self.started, 3),
        }

    def _tuning(self) -> dict[str, str] | None:
        """Per batch size warmed so far, whether its first call tuned the kernels or took a
        tuning record (backends that keep them: :mod:`ttball.kernels.records`); None for
        other backends."""
        tuning = getattr(self.backend, "tuning", None)
        if not isinstance(tuning, dict) or not tuning:
            return None
        return {str(shape[0]): source for shape, (source, _) in sorted(tuning.items())}

    def _gpu_share(self) -> dict[str, Any] | None:
        """gpu_share for /readyz: asked of CUDA on each call until the worker is ready (the
        backend may not hold its device yet), then kept, as none of it changes after."""
        if self._gpu is not None:
            return self._gpu
        share = gpu_share(getattr(self.backend, "device", None), self.sched_note)
        if self.ready:
            self._gpu = share
        return share

    def live(self) -> tuple[SessionStore, Feeder]:
        """The session store and the feeder the routes use; 503 (:meth:`require_ready`) before
        the worker is ready."""
        self.require_ready()
        assert self.store is not None and self.feeder is not None  # set when going live
        return self.store, self.feeder

    def change_settings(self, changes: Any) -> dict[str, Any]:
        """``--live-settings``: apply ``changes`` (a JSON object of :data:`LIVE_SETTINGS`'
        names) to the running worker, all or none; the current values. 404 without the
        option, 422 for a name, type or value it does not take, 503 before the worker is
        ready."""
        if not self.settings.live_settings:
            raise ApiError(404, "not_found", "live settings are off (serve --live-settings)")
        self.require_ready()
        assert self.batcher is not None
        if not isinstance(changes, dict):
            raise ApiError(422, "bad_settings", "the body must be a JSON object of settings")
        for name, value in changes.items():
            kind, low, high = LIVE_SETTINGS.get(name, (None, 0.0, 0.0))
            if kind is None:
                raise ApiError(422, "bad_settings", f"{name!r} is not a live setting (one of "
                                                    f"{', '.join(LIVE_SETTINGS)})")
            if kind is bool and not isinstance(value, bool):
                raise ApiError(422, "bad_settings", f"{name} must be true or false")
            if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not low <= value <= high):
                raise ApiError(422, "bad_settings", f"{name} must be a number in "
                                                    f"{low:g}..{high:g}, got {value!r}")
        paths = self.device.paths if self.device is not None else []
        if changes.get("decode_on_arrival") and not self.settings.pipeline_decode_on_arrival:
            raise ApiError(422, "bad_settings", "decode_on_arrival can be switched on only in a "
                                                "worker started with --decode-on-arrival")
        if "flush_after_push" in changes:  # the option's own rules, as at start-up
            try:
                replace(self.settings,
                        pipeline_flush_after_push=changes["flush_after_push"]).validate()
            except UserError as exc:
                raise ApiError(422, "bad_settings", str(exc)) from None
            # (checked before anything changes: all or none)
            self.batcher.idle_after_batch = changes["flush_after_push"]
            for path in paths:
                path.flush_after_push = changes["flush_after_push"]
        if "decode_on_arrival" in changes:
            for path in paths:
                path.decode_on_arrival = changes["decode_on_arrival"]
        if "max_delay_ms" in changes:
            self.batcher.max_delay_s = changes["max_delay_ms"] / 1e3
        if "switch_interval_ms" in changes:
            sys.setswitchinterval(changes["switch_interval_ms"] / 1e3)
        return self.live_values()

    def live_values(self) -> dict[str, Any]:
        """The :data:`LIVE_SETTINGS` as the worker runs them now."""
        batcher = self.batcher
        paths = self.device.paths if self.device is not None else []
        return {"flush_after_push": bool(batcher and batcher.idle_after_batch),
                "decode_on_arrival": any(path.decode_on_arrival for path in paths),
                "max_delay_ms": round(batcher.max_delay_s * 1e3, 6) if batcher else None,
                "switch_interval_ms": round(sys.getswitchinterval() * 1e3, 6)}

    def require_ready(self) -> None:
        if not self.ready:
            detail = f": {self.error}" if self.error else ""
            raise ApiError(503, "not_ready", f"the worker is {self.phase}{detail}",
                           {"Retry-After": "1"})

    def info(self) -> dict[str, Any]:
        s = self.settings
        return {
            "name": "ttball", "version": __version__, **self.readiness(),
            "input_size": list(self.config.input_size) if self.config else None,
            "score_threshold": getattr(self.config, "score_threshold", None),
            "max_batch": s.batch_limit, "max_delay_ms": s.max_delay_ms, "max_queue": s.max_queue,
            "max_sessions": s.max_sessions, "session_ttl_s": s.session_ttl_s,
            "sessions": len(self.store) if self.store else 0,
        }


def _own_stream(device: torch.device) -> None:
    """Make a new CUDA stream this thread's current one (a lane's kernels then queue apart
    from other lanes'); nothing on another device."""
    if device.type == "cuda":
        torch.cuda.set_stream(torch.cuda.Stream(device))


def _pool_thread(threads: int) -> None:
    """A worker thread: torch's thread count, and its Python name given to the OS too (Linux
    keeps 15 bytes), so per-thread CPU (top -H, scripts/proc_cpu.py) says which thread is busy."""
    torch.set_num_threads(threads)
    name_os_thread("tt-" + threading.current_thread().name.removeprefix("ttball-"))


def _lane_thread(threads: int, device: torch.device) -> None:
    """A lane's backend thread: torch's thread count as lane 0's, a CUDA stream of its own."""
    _pool_thread(threads)
    _own_stream(device)


def _fmt_tuning(tuning: dict[str, str] | None) -> str:
    if not tuning:
        return ""
    taken = sum(source == RECORD for source in tuning.values())
    return f"; {taken} of {len(tuning)} sizes from tuning records"


def _fmt_warm(seconds: dict[int, float]) -> str:
    return ", ".join(f"batch {b}: {t:.2f} s" for b, t in sorted(seconds.items()))

"""Dynamic batching: windows from every session (and /v2 infer rows) share the one backend.
The worker's start-up and warm-up, which build that backend: :mod:`ttball.serve.worker`.

Jobs wait in one FIFO queue. The batcher starts a batch when ``max_batch`` jobs wait or when the
oldest has waited ``max_delay`` (Triton's ``max_queue_delay``), takes up to ``max_batch`` jobs of
one kind from the head, pads them to the nearest warmed batch size (a running worker never
compiles) and runs them on a single backend thread, so the event loop never blocks. While a
batch runs, the next one gathers.

Admission is bounded: callers :meth:`Batcher.reserve` room before they touch a session's stream
(so a refused frame leaves no half-open window behind) and get :class:`Overloaded` (429 with
``Retry-After``) when queued + reserved jobs would exceed ``capacity``.

With ``--device-pipeline`` (:mod:`ttball.serve.device`) the same queue also holds *uploads*:
the undecoded JPEG frames of one request, run by a runner of their own kind. Work is counted in
thirds of a window (:data:`WINDOW` units per window), so an upload of ``k`` frames at step 3
costs ``k`` units and ``capacity``/``max_batch`` keep meaning windows.

With ``--pipeline-lanes N`` the batcher has N *lanes*: a queue, a gathering loop and a backend
thread each (:meth:`Batcher.add_lane`), so N batches run at once, one a lane; a job names its
lane (a device session's uploads go to the lane whose pipeline holds it; windows and /v2 rows
to lane 0). Admission stays one budget over all lanes.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ttball.backends import Backend
from ttball.model.config import WeightsConfig
from ttball.pipeline import infer_windows
from ttball.serve.metrics import Metrics
from ttball.serve.settings import ApiError
from ttball.stream import Window

log = logging.getLogger(__name__)

WINDOW = 3  # admission units per window: a frame at step 3 (a third of a window) costs 1
Runner = Callable[[list[Any]], Sequence[Any]]  # backend thread: items → one result each


class Overloaded(ApiError):
    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(429, "overloaded", message, {"Retry-After": str(retry_after_s)})


@dataclass
class Job:
    """One item of a batch, run by the runner of its ``kind``: ``"window"``, a session's
    ``uint8`` window in, probabilities ``(3, h, w)`` float32 out; ``"raw"``, float32 network
    input in, logits out (the /v2 route); others as registered (``"device"``: an upload).
    A runner's result that is an exception is raised to that job's caller alone."""

    item: Any
    future: asyncio.Future[Any]
    kind: str
    enqueued: float
    cost: int = WINDOW


@dataclass
class _Lane:
    """One queue and the backend thread that runs its batches, one at a time."""

    executor: ThreadPoolExecutor
    runners: dict[str, Runner]
    index: int = 0  # its label in the per-lane metrics
    # backend thread: run after a batch when less than a full batch is queued in this lane
    # (the device pipeline's flush of the batches a push left running, --pipeline-overlap)
    idle: Callable[[], None] | None = None
    # the idle work's own thread (--flush-thread): the lane takes its next batch while it runs
    # (None: on ``executor``, the lane waiting for it)
    idle_executor: ThreadPoolExecutor | None = None
    # kinds whose runners are also told the items of the batch queued after theirs:
    # run(items, upcoming) (the device pipeline's decode ahead, --decode-ahead)
    lookahead: frozenset[str] = frozenset()
    queue: deque[Job] = field(default_factory=deque)
    queued: int = 0  # units
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    finished: float = 0.0  # when its last batch's results came back (perf_counter)
    idling: asyncio.Task[None] | None = None  # idle work running on ``idle_executor``
    idle_again: bool = False  # idle work became due while it ran: run it once more after
    # the lane's thread ran its idle work right after its last batch (``idle_after_batch``);
    # set there, read and cleared on the event loop once that batch is settled
    idled: bool = False


class Batcher:
    """Queue → batches → backend thread → futures, in one lane or several. Create and use it on
    the event loop."""

    def __init__(
        self,
        backend: Backend,
        config: WeightsConfig,
        metrics: Metrics,
        *,
        sizes: Sequence[int],
        max_batch: int,
        max_delay_s: float,
        capacity: int,
        executor: ThreadPoolExecutor,
        runners: Mapping[str, Runner] | None = None,
        lookahead: Collection[str] = (),
        batches_ahead: int = 0,
        idle_after_batch: bool = False,
    ) -> None:
        """``max_batch``, ``capacity``: in windows; ``runners``: more job kinds;
        ``lookahead``: kinds whose runners in lane 0 take ``(items, upcoming)`` (see
        :meth:`add_lane`); ``batches_ahead``: full batches a lane hands its thread while one
        runs (see :meth:`_loop`); ``idle_after_batch``: a lane's thread runs its idle work
        (on that thread) right after a batch that leaves less than a full batch queued, in
        the same hand-off, instead of the event loop handing it over once the batch is
        settled (``serve --flush-after-push``)."""
        self.backend, self.config, self.metrics = backend, config, metrics
        self.sizes = sorted(set(sizes))
        if max_batch > self.sizes[-1]:
            raise ValueError(f"max_batch {max_batch} exceeds the largest warmed size {self.sizes[-1]}")
        self.max_batch, self.max_delay_s, self.capacity = max_batch, max_delay_s, capacity
        if batches_ahead < 0:
            raise ValueError(f"batches_ahead must be >= 0, got {batches_ahead}")
        self.batches_ahead = batches_ahead
        self.idle_after_batch = idle_after_batch
        # lane 0: ``executor`` is one thread, the backend's (see Worker.backend_thread)
        self._lanes = [_Lane(executor, {
            "window": lambda windows: self._run_windows(windows, raw=False),
            "raw": lambda windows: self._run_windows(windows, raw=True), **(runners or {})},
            lookahead=frozenset(lookahead))]
        self._queued = 0  # units queued, all lanes
        self._reserved = 0  # units
        self._stopping = False
        self._batch_s = 0.0  # moving average of one batch's network time, for Retry-After
        self.batches = 0

    def add_lane(self, executor: ThreadPoolExecutor, runners: Mapping[str, Runner],
                 idle: Callable[[], None] | None = None, lookahead: Collection[str] = (),
                 idle_executor: ThreadPoolExecutor | None = None) -> int:
        """Another lane: its jobs (``submit_job(..., lane=i)``) run on ``executor`` (one thread)
        by ``runners``, at the same time as other lanes' batches. Its index. Before
        :meth:`start`. The runners of the kinds in ``lookahead`` are called ``run(items, upcoming)``:
        ``upcoming``, the items of the batch queued after this one as it starts (the batch
        taken next if nothing else arrives first), for work it can start early. ``idle``: see
        :class:`_Lane`; ``idle_executor``: its own thread (see :meth:`set_idle`)."""
        self._lanes.append(_Lane(executor, dict(runners), len(self._lanes), idle, idle_executor,
                                 frozenset(lookahead)))
        return len(self._lanes) - 1

    def set_idle(self, work: Callable[[], None] | None,
                 executor: ThreadPoolExecutor | None = None, lane: int = 0) -> None:
        """``lane``'s idle work, run after a batch when less than a full batch is queued. On
        the lane's thread by default, the lane waiting for it; with ``executor`` (one thread,
        ``--flush-thread``) on that thread, the lane taking its next batch meanwhile (the idle
        work must then guard what it shares with the runners; one at a time, and once more if
        it became due while it ran)."""
        self._lanes[lane].idle, self._lanes[lane].idle_executor = work, executor

    @property
    def lanes(self) -> int:
        return len(self._lanes)

    @property
    def idle(self) -> Callable[[], None] | None:
        """Lane 0's idle work (see :class:`_Lane`)."""
        return self._lanes[0].idle

    @idle.setter
    def idle(self, work: Callable[[], None] | None) -> None:
        self._lanes[0].idle = work

    # -- admission ----------------------------------------------------------------------------
    @property
    def depth(self) -> float:
        """Work queued, in windows."""
        return self._queued / WINDOW

    def reserve(self, n: int, cost: int = WINDOW) -> None:
        """Hold room for ``n`` jobs of ``cost`` units, or raise :class:`Overloaded` (or 503
        when stopping; 413 ``too_many_frames`` for more than the whole queue holds, which no
        retry would admit)."""
        if self._stopping:
            raise ApiError(503, "shutting_down", "the worker is shutting down")
        if n * cost > self.capacity * WINDOW:
            raise ApiError(
                413, "too_many_frames",
                f"this request's frames make up to {_windows(n * cost)} windows, more than the "
                f"worker's whole queue holds ({self.capacity}, --max-queue); send fewer frames "
                f"a request (at most {self.capacity} at step 1, {self.capacity * 3} at step 3)")
        if self._reserved + self._queued + n * cost > self.capacity * WINDOW:
            raise Overloaded(
                f"{_windows(self._queued)} windows queued and {_windows(self._reserved)} "
                f"reserved (capacity {self.capacity}); retry later", self._retry_after()
            )
        self._reserved += n * cost

    def release(self, n: int, cost: int = WINDOW) -> None:
        self._reserved = max(0, self._reserved - n * cost)

    def _retry_after(self) -> int:
        batches_ahead = math.ceil((self._queued + self._reserved) / (self.max_batch * WINDOW))
        return max(1, math.ceil(batches_ahead * self._batch_s / len(self._lanes)))

    def submit(self, window: Window, raw: bool = False) -> asyncio.Future[np.ndarray]:
        """Queue one reserved window; the future gets its output row."""
        return self.submit_job("raw" if raw else "window", window)

    def submit_job(self, kind: str, item: Any, cost: int = WINDOW,
                   lane: int = 0) -> asyncio.Future[Any]:
        """Queue one reserved job of ``kind`` in ``lane``; the future gets its runner's result."""
        queue = self._lanes[lane]
        if kind not in queue.runners:
            raise ValueError(f"lane {lane} has no runner for {kind!r} jobs")
        self.release(1, cost)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        queue.queue.append(Job(item, future, kind, time.perf_counter(), cost))
        queue.queued += cost
        self._queued += cost
        self.metrics.queue_depth.set(self.depth)
        queue.wake.set()
        return future

    # -- the loop -----------------------------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for i, lane in enumerate(self._lanes):
            lane.task = loop.create_task(self._loop(lane), name=f"ttball-batcher-{i}")

    async def stop(self) -> None:
        """Run what is queued, then stop. New reservations get 503 from now on."""
        self._stopping = True
        for lane in self._lanes:
            lane.wake.set()
        await asyncio.gather(*(lane.task for lane in self._lanes if lane.task is not None))

    async def _loop(self, lane: _Lane) -> None:
        """Batches of ``lane`` to its thread, one after another. With ``batches_ahead``, up to
        that many more full batches are handed to the thread while one runs, so it starts the
        next as soon as one ends instead of after the event loop has answered it (on the H200,
        eight replicas of one lane: 74 -> 88 % of the lanes' time in pushes, and no more frames
        served, the next push waiting for its decode instead; docs/serve.md). A batch is only
        handed ahead when it is full; a short one waits for its company (``max_delay``) after
        the running ones, as without."""
        running: deque[asyncio.Future[None]] = deque()
        while True:
            if running and (len(running) > self.batches_ahead or self._short(lane)):
                await running.popleft()
                idled, lane.idled = lane.idled, False  # (by the thread, after that batch)
                if not running and not idled and lane.idle is not None and self._short(lane):
                    await self._idle(lane)
                continue
            if not lane.queue:
                if self._stopping:
                    if lane.idling is not None:
                        await lane.idling
                    return
                lane.wake.clear()
                await lane.wake.wait()
                continue
            if not running:
                await self._gather(lane)
            jobs = self._take(lane)
            if jobs:
                running.append(self._start(lane, jobs))
            elif not running and lane.idle is not None and self._short(lane):
                await self._idle(lane)

    def _short(self, lane: _Lane) -> bool:
        """Less than a full batch of work queued in ``lane``."""
        return lane.queued < self.max_batch * WINDOW

    async def _idle(self, lane: _Lane) -> None:
        """``lane``'s idle work: awaited on the lane's thread, or started on its own (once
        more after the running one if that is still at it) and not awaited."""
        if lane.idle_executor is None:
            await self._run_idle(lane)
        elif lane.idling is not None and not lane.idling.done():
            lane.idle_again = True
        else:
            lane.idling = asyncio.ensure_future(self._idle_apart(lane))

    async def _idle_apart(self, lane: _Lane) -> None:
        while True:
            lane.idle_again = False
            await self._run_idle(lane)
            if not lane.idle_again:
                return

    async def _run_idle(self, lane: _Lane) -> None:
        """``lane``'s idle work on its thread (the device pipeline's flush with overlap), its
        time observed as stage ``idle``: on the lane's thread, the lane is as occupied as in
        a batch meanwhile (the hand-offs to the thread and back included); on
        ``idle_executor``, it is not."""
        assert lane.idle is not None
        started = time.perf_counter()
        try:
            await asyncio.get_running_loop().run_in_executor(lane.idle_executor or lane.executor,
                                                             lane.idle)
        except Exception:  # noqa: BLE001  (the rows of that work are lost; the worker goes on)
            self._idle_failed()
        self.metrics.stage_seconds.labels("idle").observe(time.perf_counter() - started)

    def _idle_failed(self) -> None:
        """Count and log the idle work's exception being handled."""
        self.metrics.errors.labels("backend").inc()
        log.exception("the backend thread's idle work failed")

    def _on_thread(self, call: Callable[..., Sequence[Any]], *args: Any) -> Sequence[Any]:
        """Lane's thread: ``call(*args)``, its time there observed as stage ``thread`` (a
        batch as the loop sees it, stage ``batch``, less this is what the hand-offs to the
        thread and back cost)."""
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.metrics.stage_seconds.labels("thread").observe(time.perf_counter() - started)

    def _batch_then_idle(self, lane: _Lane, run: Callable[..., Sequence[Any]],
                         *args: Any) -> Sequence[Any]:
        """Lane's thread (``idle_after_batch``): ``run(*args)``, then the lane's idle work
        if less than a full batch is queued now (``queued`` is the event loop's, read here:
        a job queued meanwhile is at worst one the idle work runs before, as when the loop
        decides), timed as stage ``idle`` on this thread. A failed batch skips it (the loop
        runs it then, as without)."""
        out = run(*args)
        if lane.idle is not None and self._short(lane):
            lane.idled = True
            started = time.perf_counter()
            try:
                lane.idle()
            except Exception:  # noqa: BLE001  (the rows of that work are lost; the batch's are not)
                self._idle_failed()
            self.metrics.stage_seconds.labels("idle").observe(time.perf_counter() - started)
        return out

    async def _gather(self, lane: _Lane) -> None:
        """Wait until max_batch windows of work are queued in ``lane`` or its oldest job has
        waited max_delay. The time waited is observed as stage ``gather`` (0 when the batch
        was full or its oldest job had waited long enough already): its count is the batches
        that started with the lane free, its sum what waiting for company cost them."""
        started = time.perf_counter()
        try:
            await self._wait_for_company(lane)
        finally:
            self.metrics.stage_seconds.labels("gather").observe(time.perf_counter() - started)

    async def _wait_for_company(self, lane: _Lane) -> None:
        deadline = lane.queue[0].enqueued + self.max_delay_s
        while self._short(lane) and not self._stopping:
            left = deadline - time.perf_counter()
            if left <= 0:
                return
            lane.wake.clear()
            try:
                await asyncio.wait_for(lane.wake.wait(), left)
            except TimeoutError:
                return

    def _take(self, lane: _Lane) -> list[Job]:
        """Jobs of one kind from the head of ``lane``, up to ``max_batch`` windows of work (at
        least one)."""
        jobs, span = self._next_batch(lane)
        for _ in range(span):
            job = lane.queue.popleft()
            lane.queued -= job.cost
            self._queued -= job.cost
        self.metrics.queue_depth.set(self.depth)
        return jobs

    def _peek(self, lane: _Lane, kind: str) -> list[Any]:
        """The items :meth:`_take` would take next from ``lane`` if they are of ``kind``,
        left in the queue."""
        jobs, _ = self._next_batch(lane)
        return [j.item for j in jobs] if jobs and jobs[0].kind == kind else []

    def _next_batch(self, lane: _Lane) -> tuple[list[Job], int]:
        """The live jobs the next batch of ``lane`` holds -- one kind from its head, up to
        ``max_batch`` windows of work -- and how many queue entries they span (with the jobs
        whose clients went away among them)."""
        jobs: list[Job] = []
        units = span = 0
        for job in lane.queue:
            if jobs and (job.kind != jobs[0].kind or units + job.cost > self.max_batch * WINDOW):
                break
            span += 1
            if not job.future.done():  # its client went away: dropped, not run
                jobs.append(job)
                units += job.cost
        return jobs, span

    def padded_size(self, n: int) -> int:
        return self.sizes[bisect.bisect_left(self.sizes, n)]

    def _start(self, lane: _Lane, jobs: list[Job]) -> asyncio.Future[None]:
        """Hand ``jobs`` to ``lane``'s thread now (in the order of the calls); the future ends
        once their results are set."""
        started = time.perf_counter()
        for job in jobs:
            self.metrics.stage_seconds.labels("queue").observe(started - job.enqueued)
        run = lane.runners[jobs[0].kind]
        args: tuple[Any, ...] = ([j.item for j in jobs],)
        if jobs[0].kind in lane.lookahead:
            args += (self._peek(lane, jobs[0].kind),)
        call: Callable[..., Sequence[Any]] = run
        if self.idle_after_batch and lane.idle is not None and lane.idle_executor is None:
            call, args = self._batch_then_idle, (lane, run, *args)
        out = asyncio.get_running_loop().run_in_executor(lane.executor, self._on_thread,
                                                         call, *args)
        return asyncio.ensure_future(self._settle(lane, jobs, out, started))

    async def _settle(self, lane: _Lane, jobs: list[Job], running: asyncio.Future[Any],
                      started: float) -> None:
        try:
            out = await running
        except Exception as exc:  # noqa: BLE001  (every waiting client hears about it)
            self.metrics.errors.labels("backend").inc()
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(
                        ApiError(500, "backend_error", f"{type(exc).__name__}: {exc}"))
            return
        finished = time.perf_counter()
        self.batches += 1
        seconds = finished - max(started, lane.finished)  # a batch handed ahead waited for one
        lane.finished = finished
        self.metrics.stage_seconds.labels("batch").observe(seconds)
        self.metrics.lane_batch_jobs.labels(str(lane.index)).observe(len(jobs))
        self._batch_s = seconds if self.batches == 1 else 0.9 * self._batch_s + 0.1 * seconds
        for job, result in zip(jobs, out):
            if isinstance(result, concurrent.futures.Future):  # its work is still in flight
                self._settle_later(lane, job, result)
                continue
            self._observe_stay(lane, finished - job.enqueued)
            if job.future.done():
                continue
            if isinstance(result, BaseException):
                job.future.set_exception(result)
            else:
                job.future.set_result(result)

    def _observe_stay(self, lane: _Lane, seconds: float) -> None:
        """A job's stay, queued until its result: ``ttball_window_seconds`` and, by lane,
        ``ttball_lane_stay_seconds``."""
        self.metrics.window_seconds.observe(seconds)
        self.metrics.lane_stay_seconds.labels(str(lane.index)).observe(seconds)

    def _settle_later(self, lane: _Lane, job: Job, later: concurrent.futures.Future[Any]) -> None:
        """Settle ``job`` when ``lane``'s thread resolves ``later`` (a runner's result for
        work it left running: the device pipeline with --pipeline-overlap)."""
        def settle(done: asyncio.Future[Any]) -> None:
            self._observe_stay(lane, time.perf_counter() - job.enqueued)
            if job.future.done():
                return
            if done.cancelled():
                job.future.cancel()
            elif (exc := done.exception()) is not None:
                job.future.set_exception(exc)
            else:
                job.future.set_result(done.result())

        asyncio.wrap_future(later).add_done_callback(settle)

    def _run_windows(self, windows: list[Window], raw: bool) -> list[np.ndarray]:
        """Backend thread: one batch, padded to a warmed size; one output row per window."""
        size = self.padded_size(len(windows))
        start = time.perf_counter()
        out = self._infer(windows + [windows[-1]] * (size - len(windows)), raw)
        self.metrics.note_batch(len(windows), size, time.perf_counter() - start)
        return list(out[: len(windows)])

    def _infer(self, windows: list[Window], raw: bool) -> np.ndarray:
        """Backend thread: ``(B, 3, h, w)`` float32 probabilities, or logits when ``raw``."""
        if not raw:
            return infer_windows(self.backend, windows, self.config)
        batch = torch.from_numpy(np.stack([w.pixels for w in windows]))
        return self.backend(batch).float().cpu().numpy()


# -- start-up -------------------------------------------------------------------------------------


def _windows(units: int) -> str:
    return f"{units / WINDOW:.4g}"

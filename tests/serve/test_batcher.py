"""The dynamic batcher with a recording backend: batch sizes, padding, delays, admission, stop."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import numpy as np
import pytest
import torch

from ttball.backends import BackendBase
from ttball.errors import UserError
from ttball.model.config import WeightsConfig
from ttball.serve.batcher import Batcher, Overloaded
from ttball.serve.metrics import Metrics
from ttball.serve.settings import ApiError, ServeSettings
from ttball.stream import Window

CFG = WeightsConfig(input_height=4, input_width=8)


class RecordingBackend(BackendBase):
    """Logits = the first three input channels: every output row says which input it came from."""

    name = "recording"

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__(torch.device("cpu"))
        self.sizes: list[int] = []
        self.delay_s = delay_s

    def run(self, batch: torch.Tensor) -> torch.Tensor:
        self.sizes.append(batch.shape[0])
        time.sleep(self.delay_s)
        return batch[:, :3].clone()


def window(value: float, raw: bool = False) -> Window:
    dtype = np.float32 if raw else np.uint8
    return Window("s", (0, 1, 2), np.full((9, 4, 8), value, dtype))


EXECUTOR = ThreadPoolExecutor(1, thread_name_prefix="test-backend")


def make(backend, sizes=(1, 2, 4), max_batch=4, delay_s=0.0, capacity=16) -> Batcher:
    return Batcher(backend, CFG, Metrics(), sizes=sizes, max_batch=max_batch,
                   max_delay_s=delay_s, capacity=capacity, executor=EXECUTOR)


def stage(batcher: Batcher, name: str) -> tuple[float, float]:
    """``ttball_stage_seconds{stage=name}``'s count and sum."""
    registry = batcher.metrics.registry
    return tuple(registry.get_sample_value(f"ttball_stage_seconds_{part}", {"stage": name}) or 0.0
                 for part in ("count", "sum"))


def submit(batcher: Batcher, values, raw=False):
    batcher.reserve(len(values))
    return [batcher.submit(window(v, raw), raw=raw) for v in values]


def test_batches_are_padded_to_warmed_sizes_and_rows_go_home() -> None:
    async def go():
        backend = RecordingBackend()
        batcher = make(backend, sizes=(1, 2, 4), max_batch=4, delay_s=0.05)
        batcher.start()
        futures = submit(batcher, [10, 20, 30, 40, 50])
        rows = await asyncio.gather(*futures)
        more = await asyncio.gather(*submit(batcher, [60, 70, 80]))
        await batcher.stop()
        return backend, rows + more

    backend, rows = asyncio.run(go())
    assert backend.sizes == [4, 1, 4]  # 5 = 4 + 1; 3 is padded to 4; never an unwarmed size
    # Each future got its own window's probabilities (sigmoid of the normalised pixel value).
    assert np.argsort([r.mean() for r in rows]).tolist() == list(range(8))
    assert all(r.shape == (3, 4, 8) for r in rows)


def test_the_oldest_waits_at_most_max_delay_for_company() -> None:
    async def go():
        backend = RecordingBackend()
        batcher = make(backend, max_batch=4, delay_s=0.2)
        batcher.start()
        start = time.perf_counter()
        first = submit(batcher, [1])
        await asyncio.sleep(0.05)
        second = submit(batcher, [2])
        await asyncio.gather(*first, *second)
        waited = time.perf_counter() - start
        await batcher.stop()
        return backend.sizes, waited, stage(batcher, "gather")

    sizes, waited, (gathers, gathered_s) = asyncio.run(go())
    assert sizes == [2]  # the second joined the first's batch
    assert 0.15 < waited < 2.0
    assert gathers == 1 and 0.15 < gathered_s <= waited  # its wait for company, observed


def test_a_batch_that_is_full_or_has_waited_enough_gathers_for_no_time() -> None:
    async def go():
        backend = RecordingBackend(delay_s=0.1)
        batcher = make(backend, max_batch=2, delay_s=5.0)
        batcher.start()
        jobs = submit(batcher, [1, 2, 3, 4])  # two full batches: neither waits for company
        await asyncio.gather(*jobs)
        await batcher.stop()
        return backend.sizes, stage(batcher, "gather")

    sizes, (gathers, gathered_s) = asyncio.run(go())
    assert sizes == [2, 2]
    assert gathers == 2 and gathered_s < 0.05


def test_raw_and_window_jobs_never_share_a_batch() -> None:
    async def go():
        backend = RecordingBackend()
        batcher = make(backend, max_batch=4, delay_s=0.05)
        batcher.start()
        a = submit(batcher, [1, 2])
        b = submit(batcher, [0.5], raw=True)
        rows = await asyncio.gather(*a, *b)
        await batcher.stop()
        return backend.sizes, rows

    sizes, rows = asyncio.run(go())
    assert sizes == [2, 1]
    np.testing.assert_array_equal(rows[2], np.full((3, 4, 8), 0.5, np.float32))  # raw logits


def test_admission_is_bounded_and_stop_runs_what_is_queued() -> None:
    async def go():
        backend = RecordingBackend(delay_s=0.05)
        batcher = make(backend, sizes=(1,), max_batch=1, capacity=3)
        batcher.start()
        futures = submit(batcher, [1, 2, 3])
        with pytest.raises(Overloaded) as err:
            batcher.reserve(1)
        assert err.value.status == 429 and int(err.value.headers["Retry-After"]) >= 1
        cancelled = futures[1]
        cancelled.cancel()  # its client went away: skipped, not run
        await batcher.stop()
        with pytest.raises(ApiError) as stopped:
            batcher.reserve(1)
        assert stopped.value.status == 503
        return backend.sizes, [f.done() for f in futures]

    sizes, done = asyncio.run(go())
    assert sizes == [1, 1] and all(done)


def test_backend_failure_reaches_every_waiting_client() -> None:
    class Broken(RecordingBackend):
        def run(self, batch):
            raise RuntimeError("device lost")

    async def go():
        batcher = make(Broken(), delay_s=0.01)
        batcher.start()
        results = await asyncio.gather(*submit(batcher, [1, 2]), return_exceptions=True)
        await batcher.stop()
        return results

    results = asyncio.run(go())
    assert all(isinstance(r, ApiError) and r.status == 500 and "device lost" in r.message
               for r in results)


def test_lanes_run_their_batches_at_once_on_their_own_threads_under_one_budget() -> None:
    """--pipeline-lanes: a lane's jobs run on its own thread by its own runner, at the same
    time as lane 0's batches; admission counts every lane's work; stop drains every lane."""

    spans: dict[str, list[tuple[str, float, float]]] = {"lane0": [], "lane1": []}

    def runner(name: str):
        def run(items: list[int]) -> list[int]:
            start = time.perf_counter()
            time.sleep(0.2)
            spans[name].append((threading.current_thread().name, start, time.perf_counter()))
            return [10 * i for i in items]
        return run

    lane1_thread = ThreadPoolExecutor(1, thread_name_prefix="test-lane1")

    async def go():
        batcher = Batcher(RecordingBackend(), CFG, Metrics(), sizes=(1, 2), max_batch=2,
                          max_delay_s=0.0, capacity=6, executor=EXECUTOR,
                          runners={"job": runner("lane0")})
        assert batcher.add_lane(lane1_thread, {"job": runner("lane1")}) == 1
        assert batcher.lanes == 2
        batcher.start()
        batcher.reserve(2)
        with pytest.raises(ValueError, match="lane 1 has no runner for 'window'"):
            batcher.submit_job("window", window(1), lane=1)
        batcher.release(1)
        a = batcher.submit_job("job", 1)
        b = batcher.submit_job("job", 2, lane=1)
        batcher.reserve(4)  # the budget is shared: 2 queued + 4 reserved fill capacity 6
        with pytest.raises(Overloaded):
            batcher.reserve(1)
        batcher.release(4)
        out = await asyncio.gather(a, b)
        batcher.reserve(1)
        late = batcher.submit_job("job", 3, lane=1)
        await batcher.stop()  # runs what is queued in every lane
        return out, late.result()

    out, late = asyncio.run(go())
    lane1_thread.shutdown()
    assert out == [10, 20] and late == 30
    (t0, s0, e0), = spans["lane0"]
    assert t0.startswith("test-backend")
    assert [t for t, _, _ in spans["lane1"]] == ["test-lane1_0"] * 2
    _, s1, e1 = spans["lane1"][0]
    assert s1 < e0 and s0 < e1  # the two lanes' batches overlapped in time


def test_a_lookahead_kinds_runner_is_told_the_batch_queued_after_its_own() -> None:
    """--decode-ahead: a runner of a kind in ``lookahead`` gets ``(items, upcoming)``, upcoming
    being what the next batch would take as this one starts (same kind, up to max_batch,
    clients gone skipped); other kinds in the same lane are called as before."""
    seen: list[tuple[list[int], list[int]]] = []

    def ahead(items: list[int], upcoming: list[int]) -> list[int]:
        seen.append((items, upcoming))
        return items

    def plain(items: list[int]) -> list[int]:
        return [-i for i in items]

    async def go():
        batcher = Batcher(RecordingBackend(), CFG, Metrics(), sizes=(1, 2), max_batch=2,
                          max_delay_s=0.0, capacity=16, executor=EXECUTOR,
                          runners={"ahead": ahead, "plain": plain}, lookahead=("ahead",))
        batcher.reserve(8)  # all queued before the lane starts taking
        jobs = [batcher.submit_job("ahead", i) for i in (1, 2, 3, 4, 5, 6)]
        jobs += [batcher.submit_job("plain", 7), batcher.submit_job("ahead", 8)]
        jobs.pop(4).cancel()  # 5: its client went away, neither taken nor told
        batcher.start()
        out = await asyncio.gather(*jobs)
        await batcher.stop()
        return out

    assert asyncio.run(go()) == [1, 2, 3, 4, 6, -7, 8]
    assert seen == [([1, 2], [3, 4]), ([3, 4], [6]), ([6], []), ([8], [])]


def _spans_under_a_late_loop(batches_ahead: int, lookahead: bool = False):
    """Three full batches of two, each job's answer holding the event loop for 0.1 s (a loop
    late under load): the runner's (items, upcoming, start, end) per batch, and the rows."""
    spans: list[tuple[list[int], list[int], float, float]] = []

    def run(items: list[int], upcoming: list[int] = ()) -> list[int]:
        start = time.perf_counter()
        time.sleep(0.05)
        spans.append((items, list(upcoming), start, time.perf_counter()))
        return [10 * i for i in items]

    async def go():
        batcher = Batcher(RecordingBackend(), CFG, Metrics(), sizes=(1, 2), max_batch=2,
                          max_delay_s=0.0, capacity=16, executor=EXECUTOR, runners={"job": run},
                          lookahead=("job",) if lookahead else (), batches_ahead=batches_ahead)
        batcher.reserve(6)
        jobs = [batcher.submit_job("job", i) for i in range(1, 7)]
        for job in jobs:
            job.add_done_callback(lambda _: time.sleep(0.1))
        batcher.start()
        out = await asyncio.gather(*jobs)
        await batcher.stop()
        return out

    return spans, asyncio.run(go())


def test_batches_ahead_start_when_the_last_ends_not_when_the_loop_answers() -> None:
    """--batches-ahead 1: a full batch is handed to the lane's thread while one runs, so a
    late event loop no longer leaves the thread idle between batches; rows and order as before."""
    spans, out = _spans_under_a_late_loop(batches_ahead=0)
    assert out == [10, 20, 30, 40, 50, 60]
    gaps = [b[2] - a[3] for a, b in pairwise(spans)]
    assert min(gaps) > 0.15  # one at a time: each waits for the loop to answer two jobs
    spans, out = _spans_under_a_late_loop(batches_ahead=1)
    assert out == [10, 20, 30, 40, 50, 60]
    assert [items for items, *_ in spans] == [[1, 2], [3, 4], [5, 6]]
    assert spans[1][2] - spans[0][3] < 0.03  # the second began as the first ended


def test_batches_ahead_tell_a_lookahead_runner_the_batch_after_its_own() -> None:
    spans, out = _spans_under_a_late_loop(batches_ahead=1, lookahead=True)
    assert out == [10, 20, 30, 40, 50, 60]
    assert [(items, upcoming) for items, upcoming, *_ in spans] == [
        ([1, 2], [3, 4]), ([3, 4], [5, 6]), ([5, 6], [])]


def test_a_short_batch_is_not_handed_ahead_and_idle_work_waits_for_the_thread() -> None:
    """Only a full batch goes ahead: a short one waits for the running batches; the lane's
    idle work (a flush when the queue runs short) runs once nothing is running, as with one
    batch at a time: after [3, 4] (one job left) and at the end."""
    events: list[tuple[str, object]] = []

    def run(items: list[int]) -> list[int]:
        events.append(("run", items))
        time.sleep(0.05)
        return items

    def idle() -> None:
        events.append(("idle", None))
        time.sleep(0.02)

    async def go():
        batcher = Batcher(RecordingBackend(), CFG, Metrics(), sizes=(1, 2), max_batch=2,
                          max_delay_s=0.0, capacity=16, executor=EXECUTOR, runners={"job": run},
                          batches_ahead=2)
        batcher.add_lane(ThreadPoolExecutor(1), {"job": run}, idle=idle)
        batcher.start()
        batcher.reserve(5)
        first = [batcher.submit_job("job", i, lane=1) for i in (1, 2, 3, 4, 5)]
        await asyncio.gather(*first)
        await batcher.stop()
        return stage(batcher, "idle")

    idles, idle_s = asyncio.run(go())
    assert events == [("run", [1, 2]), ("run", [3, 4]), ("idle", None), ("run", [5]),
                      ("idle", None)]
    assert idles == 2 and idle_s >= 2 * 0.02  # each idle call's time on the lane, observed


def test_a_failed_batch_fails_its_jobs_alone_when_the_next_was_handed_ahead() -> None:
    def run(items: list[int]) -> list[int]:
        time.sleep(0.02)
        if 1 in items:
            raise RuntimeError("boom")
        return items

    async def go():
        batcher = Batcher(RecordingBackend(), CFG, Metrics(), sizes=(1, 2), max_batch=2,
                          max_delay_s=0.0, capacity=16, executor=EXECUTOR, runners={"job": run},
                          batches_ahead=1)
        batcher.reserve(4)
        jobs = [batcher.submit_job("job", i) for i in (1, 2, 3, 4)]
        batcher.start()
        out = await asyncio.gather(*jobs, return_exceptions=True)
        await batcher.stop()
        return out

    out = asyncio.run(go())
    assert [type(o).__name__ for o in out[:2]] == ["ApiError"] * 2 and out[2:] == [3, 4]
    assert out[0].status == 500 and "boom" in out[0].message


def test_batches_ahead_is_bounded() -> None:
    with pytest.raises(ValueError, match="batches_ahead"):
        Batcher(RecordingBackend(), CFG, Metrics(), sizes=(1, 2), max_batch=2, max_delay_s=0.0,
                capacity=4, executor=EXECUTOR, batches_ahead=-1)
    with pytest.raises(UserError, match="--batches-ahead"):
        ServeSettings(batches_ahead=5).validate()


def test_max_batch_above_warmed_sizes_is_refused() -> None:
    with pytest.raises(ValueError):
        make(RecordingBackend(), sizes=(1, 2), max_batch=3)


def test_api_errors_pickle_with_every_field() -> None:
    """A Ray replica's errors travel pickled: status, code, headers and frame must survive."""
    import pickle

    from ttball.serve.batcher import Overloaded
    from ttball.serve.settings import ApiError

    refused = pickle.loads(pickle.dumps(ApiError(422, "frame_size", "other size", frame=7)))
    assert (type(refused), refused.status, refused.code, refused.message, refused.frame) == (
        ApiError, 422, "frame_size", "other size", 7)
    overloaded = pickle.loads(pickle.dumps(Overloaded("queue full", 3)))
    assert type(overloaded) is Overloaded and overloaded.status == 429
    assert overloaded.headers == {"Retry-After": "3"} and str(overloaded) == "queue full"


def test_idle_work_on_a_thread_of_its_own_lets_the_next_batch_start_meanwhile() -> None:
    """``set_idle(work, executor)`` (--flush-thread): the idle work after a short batch runs on
    its own thread and the lane starts its next batch while it runs; idle work that becomes
    due meanwhile runs once more after it, never two at once; stop waits for it."""
    events: list[tuple[str, object, float]] = []
    lock = threading.Lock()
    running_idle = [0]

    def run(items: list[int]) -> list[int]:
        with lock:
            events.append(("run", items, time.perf_counter()))
        time.sleep(0.02)
        return items

    def idle() -> None:
        with lock:
            running_idle[0] += 1
            assert running_idle[0] == 1  # one at a time
            events.append(("idle", None, time.perf_counter()))
        time.sleep(0.15)
        with lock:
            running_idle[0] -= 1
            events.append(("idle-end", None, time.perf_counter()))

    async def go():
        batcher = Batcher(RecordingBackend(), CFG, Metrics(), sizes=(1, 2), max_batch=2,
                          max_delay_s=0.0, capacity=16, executor=EXECUTOR, runners={"job": run})
        batcher.add_lane(ThreadPoolExecutor(1), {"job": run})
        batcher.set_idle(idle, ThreadPoolExecutor(1), lane=1)
        batcher.start()
        batcher.reserve(3)
        first = batcher.submit_job("job", 1, lane=1)
        await first
        await asyncio.sleep(0.03)  # the idle work is running now
        second = [batcher.submit_job("job", i, lane=1) for i in (2, 3)]
        await asyncio.gather(*second)
        await batcher.stop()
        return stage(batcher, "idle")

    idles, idle_s = asyncio.run(go())
    kinds = [kind for kind, _, _ in events]
    assert kinds[:2] == ["run", "idle"] and kinds.count("idle") == 2 == idles
    later_run = next(t for kind, items, t in events if kind == "run" and items == [2, 3])
    first_idle_end = next(t for kind, _, t in events if kind == "idle-end")
    assert later_run < first_idle_end  # the batch ran while the idle work did
    assert kinds[-1] == "idle-end"  # the second idle work ran to its end before stop returned
    assert idle_s >= 2 * 0.15


def test_idle_work_after_a_batch_runs_in_its_hand_off_once() -> None:
    """``idle_after_batch`` (--flush-after-push): the lane's thread runs its idle work right
    after a batch that leaves less than a full batch queued, on that thread and before the
    batch's results are back; the event loop does not run it again for that batch. A batch
    with a full one queued behind it is followed by the next batch, not by idle work; a
    failing idle work is counted and the batch's results still arrive."""
    events: list[tuple[str, object, str]] = []
    fail = [False]
    settled: list[int] = []  # the batches settled on the event loop when each idle work ran

    def run(items: list[int]) -> list[int]:
        events.append(("run", items, threading.current_thread().name))
        time.sleep(0.03)
        return items

    def idle() -> None:
        events.append(("idle", None, threading.current_thread().name))
        settled.append(batcher.batches)
        if fail[0]:
            raise RuntimeError("flush failed")

    async def go():
        nonlocal batcher
        batcher = Batcher(RecordingBackend(), CFG, Metrics(), sizes=(1, 2), max_batch=2,
                          max_delay_s=0.0, capacity=16, executor=EXECUTOR, runners={"job": run},
                          idle_after_batch=True)
        batcher.add_lane(ThreadPoolExecutor(1, thread_name_prefix="lane-one"), {"job": run},
                         idle=idle)
        batcher.start()
        batcher.reserve(6)
        first = [batcher.submit_job("job", i, lane=1) for i in (1, 2, 3, 4, 5)]
        out = await asyncio.gather(*first)
        fail[0] = True
        out.append(await batcher.submit_job("job", 6, lane=1))
        await batcher.stop()
        return (out, stage(batcher, "idle"), stage(batcher, "batch")[0],
                stage(batcher, "thread"), batcher.metrics)

    batcher: Batcher | None = None
    out, (idles, _), batches, (threads, thread_s), metrics = asyncio.run(go())
    assert out == [1, 2, 3, 4, 5, 6]
    assert settled == [1, 2, 3]  # each before its own batch was settled: in the same hand-off
    # [1, 2] ran with [3, 4] queued behind it (full: no idle work); [3, 4] left one job
    assert [(kind, items) for kind, items, _ in events] == [
        ("run", [1, 2]), ("run", [3, 4]), ("idle", None), ("run", [5]), ("idle", None),
        ("run", [6]), ("idle", None)]
    assert {name for _, _, name in events} == {"lane-one_0"}
    assert idles == 3 and batches == 4
    assert threads == 4 and thread_s >= 4 * 0.03  # each batch (and its idle work) on the thread
    assert metrics.registry.get_sample_value("ttball_errors_total", {"kind": "backend"}) == 1


def test_idle_after_batch_leaves_idle_work_on_its_own_thread_alone() -> None:
    """With ``set_idle(work, executor)`` (--flush-thread) the idle work keeps its own thread:
    ``idle_after_batch`` applies to idle work on the lane's thread only."""
    names: list[str] = []

    def idle() -> None:
        names.append(threading.current_thread().name)

    async def go():
        batcher = Batcher(RecordingBackend(), CFG, Metrics(), sizes=(1, 2), max_batch=2,
                          max_delay_s=0.0, capacity=16, executor=EXECUTOR,
                          runners={"job": lambda items: items}, idle_after_batch=True)
        batcher.set_idle(idle, ThreadPoolExecutor(1, thread_name_prefix="own-idle"))
        batcher.start()
        batcher.reserve(1)
        await batcher.submit_job("job", 1)
        await batcher.stop()

    asyncio.run(go())
    assert names == ["own-idle_0"]


def test_each_lane_reports_its_batches_jobs_and_its_jobs_stay() -> None:
    """``ttball_lane_batch_jobs{lane}`` and ``ttball_lane_stay_seconds{lane}``: a lane's
    batches and its jobs' stay under its own label, beside the all-lane
    ``ttball_window_seconds``; a job settled later (overlap) counts under its lane too."""
    import concurrent.futures

    slow_lane = ThreadPoolExecutor(1, thread_name_prefix="test-lane-slow")

    def fast(items: list[int]) -> list[int]:
        return list(items)

    def slow(items: list[int]) -> list[object]:
        time.sleep(0.05)
        later: concurrent.futures.Future[int] = concurrent.futures.Future()
        threading.Timer(0.05, later.set_result, (items[-1],)).start()
        return [*items[:-1], later]  # the last job's result still in flight

    async def go() -> Batcher:
        batcher = Batcher(RecordingBackend(), CFG, Metrics(), sizes=(1, 2, 4), max_batch=4,
                          max_delay_s=0.0, capacity=16, executor=EXECUTOR,
                          runners={"job": fast})
        batcher.add_lane(slow_lane, {"job": slow})
        batcher.start()
        batcher.reserve(4)
        jobs = [batcher.submit_job("job", 1), batcher.submit_job("job", 2, lane=1),
                batcher.submit_job("job", 3, lane=1), batcher.submit_job("job", 4, lane=1)]
        assert await asyncio.gather(*jobs) == [1, 2, 3, 4]
        await batcher.stop()
        return batcher

    batcher = asyncio.run(go())
    slow_lane.shutdown()
    registry = batcher.metrics.registry

    def sample(name: str, lane: str) -> float:
        return registry.get_sample_value(name, {"lane": lane}) or 0.0

    assert sample("ttball_lane_batch_jobs_count", "0") == 1
    assert sample("ttball_lane_batch_jobs_sum", "0") == 1
    assert sample("ttball_lane_batch_jobs_sum", "1") == 3  # one batch of three
    assert sample("ttball_lane_stay_seconds_count", "0") == 1
    assert sample("ttball_lane_stay_seconds_count", "1") == 3
    # lane 1's jobs waited for its slow batch (0.05 s), the one settled later 0.05 s more
    assert sample("ttball_lane_stay_seconds_sum", "1") >= 0.05 + 0.05 + 0.1 - 0.01
    assert registry.get_sample_value("ttball_window_seconds_count") == 4

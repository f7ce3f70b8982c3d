"""ttball.serve.metrics: the event loop's lag, measured on a loop that is then blocked."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from ttball.serve.metrics import ALLOCATOR_EVENTS, Metrics


def _lag(metrics: Metrics) -> tuple[float, float]:
    """(observations, seconds summed) of ``ttball_event_loop_lag_seconds``."""
    samples = {s.name: s.value for s in metrics.loop_lag.collect()[0].samples}
    return samples["ttball_event_loop_lag_seconds_count"], samples["ttball_event_loop_lag_seconds_sum"]


def test_watch_loop_sees_a_loop_held_by_blocking_work() -> None:
    metrics = Metrics()

    async def run() -> tuple[tuple[float, float], tuple[float, float]]:
        watch = asyncio.get_running_loop().create_task(metrics.watch_loop(interval_s=0.005))
        await asyncio.sleep(0.1)  # a free loop: many small lags
        free = _lag(metrics)
        time.sleep(0.08)  # noqa: ASYNC251  (the point: the loop held 80 ms, the next wake-up that late)
        await asyncio.sleep(0.02)
        watch.cancel()
        return free, _lag(metrics)

    (n_free, s_free), (n, s) = asyncio.run(run())
    assert n_free >= 5 and s_free / n_free < 0.02
    assert n > n_free and s - s_free >= 0.05  # the held 80 ms, less the interval it overlapped


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_watch_cuda_exports_the_allocator_s_events() -> None:
    metrics, device = Metrics(), torch.device("cuda")
    metrics.watch_cuda(device)
    before = torch.cuda.memory_stats(device).get("num_device_alloc", 0)
    kept = torch.empty(1 << 30 >> 2, device=device)  # 1 GiB: a fresh cudaMalloc, not the cache
    text = metrics.render().decode()
    samples = {(s.name, s.labels.get("event")): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    for event in ALLOCATOR_EVENTS:
        assert ("ttball_cuda_allocator_events", event) in samples, event
    assert samples[("ttball_cuda_allocator_events", "num_device_alloc")] >= before + 1
    del kept

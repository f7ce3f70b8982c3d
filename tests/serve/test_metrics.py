"""ttball.serve.metrics: the event loop's lag, measured on a loop that is then blocked."""

from __future__ import annotations

import asyncio
import time

from ttball.serve.metrics import Metrics


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

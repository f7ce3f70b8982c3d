"""The Ray ingress's own metrics, without a cluster: calls to replicas are timed."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import pytest

pytest.importorskip("fastapi")

from ttball.distributed.serve_ingress import TimedCall
from ttball.distributed.serve_metrics import IngressMetrics, merge


class _Reply:
    """Stands in for a Ray DeploymentResponse: awaitable once, after ``delay`` seconds."""

    def __init__(self, value: object, delay: float) -> None:
        self.value, self.delay = value, delay

    def __await__(self) -> Generator[Any, None, object]:
        yield from asyncio.sleep(self.delay).__await__()
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


def _count_and_sum(metrics: IngressMetrics, method: str) -> tuple[float, float]:
    text = merge(metrics.render(), []).decode()
    values = {}
    for line in text.splitlines():
        for kind in ("count", "sum"):
            if line.startswith(f'ttball_ingress_call_seconds_{kind}{{method="{method}"}}'):
                values[kind] = float(line.split()[-1])
    return values.get("count", 0.0), values.get("sum", 0.0)


def test_a_replica_call_is_timed_from_call_to_reply_also_when_it_fails() -> None:
    metrics = IngressMetrics()

    async def run() -> None:
        ok = TimedCall(_Reply({"rows": 1}, 0.05), metrics.call_seconds.labels("push"))
        assert await ok == {"rows": 1}
        failed = TimedCall(_Reply(RuntimeError("replica died"), 0.0),
                           metrics.call_seconds.labels("push"))
        with pytest.raises(RuntimeError, match="replica died"):
            await failed

    asyncio.run(run())
    count, total = _count_and_sum(metrics, "push")
    assert count == 2
    assert 0.05 <= total < 1.0
    assert _count_and_sum(metrics, "status") == (0.0, 0.0)

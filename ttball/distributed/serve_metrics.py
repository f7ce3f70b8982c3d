"""``/metrics`` of ``serve --ray``: the ingress's own families plus every replica's, labelled.

The ingress answers HTTP, so it owns the request, error and session families (the names and
meanings of docs/serve.md) and adds four of its own: ``ttball_replicas`` (replicas that answered
the last status round), ``ttball_session_moves`` (sessions resumed on another replica),
``ttball_frames_lost`` (frames whose rows never came because their replica died) and
``ttball_ingress_call_seconds`` (each call to a replica, by method, from the call until the
ingress holds the reply: next to the replicas' ``ttball_window_seconds`` it says whether time
is lost in the replicas or in front of them). Everything
else (batches, queue, stages, windows, frames, readiness, start-up, GPU memory) is measured by
the replicas: each replica's samples get a ``replica="<id>"`` label, so a dashboard sums or
splits them (``sum by (le) (rate(ttball_window_seconds_bucket[1m]))``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from ttball.serve.metrics import LATENCY_BUCKETS, Metrics

INGRESS_FAMILIES = frozenset({
    "ttball_requests", "ttball_request_seconds", "ttball_errors", "ttball_sessions",
    "ttball_session_events", "ttball_replicas", "ttball_session_moves", "ttball_frames_lost",
    "ttball_ingress_call_seconds",
})


class IngressMetrics(Metrics):
    """The single worker's metrics plus the four of the Ray ingress."""

    def __init__(self) -> None:
        super().__init__()
        r = self.registry
        self.replicas = Gauge("ttball_replicas", "Worker replicas that answered the last round",
                              registry=r)
        self.session_moves = Counter("ttball_session_moves",
                                     "Sessions resumed on another replica (theirs died)",
                                     registry=r)
        self.frames_lost = Counter("ttball_frames_lost",
                                   "Frames never answered because their replica died",
                                   registry=r)
        self.call_seconds = Histogram("ttball_ingress_call_seconds",
                                      "Calls to a replica, from the call until the ingress holds "
                                      "the reply", ["method"], buckets=LATENCY_BUCKETS, registry=r)


class _Families:
    """A collector that yields families parsed already (``generate_latest`` renders them)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def merge(ingress: bytes, replicas: list[tuple[str, str]]) -> bytes:
    """One exposition: the ingress families from ``ingress``, the rest from each
    ``(replica id, text)`` with a ``replica`` label."""
    merged: dict[str, Metric] = {}
    for family in text_string_to_metric_families(ingress.decode()):
        if family.name in INGRESS_FAMILIES:
            merged[family.name] = family
    for replica, text in replicas:
        for family in text_string_to_metric_families(text):
            if family.name in INGRESS_FAMILIES or family.name.endswith("_created"):
                continue  # the ingress's own, or a creation time the text format splits off
            into = merged.setdefault(family.name, _empty_like(family))
            for s in family.samples:
                into.add_sample(s.name, {**s.labels, "replica": replica}, s.value, s.timestamp)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(merged.values()))  # type: ignore[arg-type]
    return generate_latest(registry)


def _empty_like(family: Any) -> Metric:
    return Metric(family.name, family.documentation, family.type, family.unit)

"""Per load-test run of ``scripts/gpu_serve_loadtest.sh`` or ``scripts/gpu_ray_loadtest.sh``:
the device pipeline's host time a frame, by push stage, from the ``/metrics`` snapshot taken
after each run (``metrics-S.txt`` for S sessions; ``metrics-R-S.txt`` for R Ray replicas, each
sample labelled with its replica and summed over them here).

The snapshots are cumulative, so each run's figures are the difference from the run before
(the first run's from zero, or from ``metrics-0.txt`` / ``metrics-R-0.txt`` where the script
saved one once the server was ready, which leaves the warm-up's pushes out; each replica count
is a server of its own, so its first run's too). Push stages are summed over every lane: with two lanes a stage
that takes 0.1 ms a frame on each thread reads 0.1 here, as with one, unless the lanes slow
each other (their threads share one interpreter lock)::

    python scripts/serve_push_costs.py OUT/serve [OUT/ray ...]

``--quantiles``: each stage's mean and quantiles instead; ``--flushes``: ms a flush (the
device pipeline's flush with overlap) by part, beside the push and the batch as the event loop
sees them (what the hand-offs to a lane's thread and back cost); ``--loads``: a load a row, the
figures that tell a fast run from a slow one, and the live settings it ran under; ``--pairs``:
settings compared within starts (each folder a start whose loads ran under two live settings,
A B B A): B's loads less A's, a start a row, then their mean and spread over the starts;
``--replicas``: each replica's share of a load, its frames a push and its windows' stay.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from ray_loadtest_summary import agreed, replica_settings

STAGES = ("decode", "preprocess", "network", "postprocess", "track", "total")
# serve --decode-processes's split of the decode stage (transfer's own split since the
# thirtieth session): columns only where a run has them
DECODE_PROCESS = ("decode_child", "decode_fill", "decode_transfer", "decode_to_child",
                  "decode_from_child", "decode_copy_out")
# each backend call's time on its lane's stream (GpuPipeline with overlap on CUDA, since the
# thirty-fourth session): columns only where a run has them
GPU = ("gpu_between", "gpu_normalize", "gpu_network", "gpu_stats")
# and their parts (thirty-fifth session): the network's copy in, graph and copy out (a CUDA-graph
# backend), the statistics' upload, graph, the logits' copy and the copy to the host
GPU_STEPS = ("gpu_net_copy_in", "gpu_net_graph", "gpu_net_copy_out", "gpu_stats_upload",
             "gpu_stats_graph", "gpu_stats_clone", "gpu_stats_to_host")
# postprocess's parts (thirty-sixth session): the statistics launched behind the network, the
# wait for the previous call's, and their reading into candidates
POST = ("post_launch", "post_wait", "post_read")
OPTIONAL = (*DECODE_PROCESS, "arrival_wait", *POST, *GPU, *GPU_STEPS)
# the batcher's own stages of a lane (fifty-fourth session): a batch started on a free lane
# waiting for company (--max-delay-ms), the lane's idle work (the flush with overlap), and
# (fifty-fifth) each batch as the event loop sees it, its hand-offs to the thread and back
# included, and on its thread
LANE = ("gather", "idle", "batch", "thread")
# the flushes' seconds by stage (ttball_flush_seconds, fifty-fourth session; the GPU time of the
# calls they read back, the whole call on its thread and its CPU time, fifty-fifth): flush_*_ms
# columns, a frame, where a run has them
FLUSH = ("wait", "post_wait", "post_read", "track", *GPU, "call", "call_cpu")
# --pairs: the figures compared between a start's loads (load_states' keys)
PAIRED = ("p99", "frames_a_push", "gather_ms", "push_ms", "decode_ms", "stay_ms",
          "gpu_network_ms", "handoff_ms")
NO_WAIT_S = 0.0005  # ttball_stage_seconds' first bucket: a gather under it did not wait
# serve --decode-on-arrival (fifty-seventh session): the arrival decoder's batches, from a
# batch's call to its decode's end on the GPU; a column where a run has them
ARRIVAL = (("arrival_batch", "ttball_arrival_batch_seconds", None),)
# --quantiles: (label in the report, metric, stage label or None)
HISTOGRAMS = (("stay", "ttball_window_seconds", None), ("queue", "ttball_stage_seconds", "queue"),
              ("push", "ttball_push_seconds", "total"), ("decode", "ttball_push_seconds", "decode"),
              ("preprocess", "ttball_push_seconds", "preprocess"),
              ("postprocess", "ttball_push_seconds", "postprocess"),
              ("loop_lag", "ttball_event_loop_lag_seconds", None),
              *((stage, "ttball_push_seconds", stage) for stage in OPTIONAL),
              *((stage, "ttball_stage_seconds", stage) for stage in LANE),
              *ARRIVAL)
# --replicas: the batcher's per-lane families (fifty-sixth session), as replica_histograms names them
LANE_METRICS = {"ttball_lane_stay_seconds": "stay", "ttball_lane_batch_jobs": "push_frames"}
# --quantiles: not in ms (each run's mean only)
PUSH_FRAMES = ("push_frames", "ttball_push_frames", None)
QUANTILES = (0.5, 0.95, 0.99)
COUNTERS = ("ttball_frames_total", "ttball_windows_total", "ttball_batch_size_count",
            "ttball_batch_padding_total", "ttball_windows_carried_total")
# the network's rows that were padding, and the windows a push carried to the next (serve
# --carry-windows, thirty-ninth session), in % of the windows run: columns where a run has them
BATCHING = ("padded_pct", "carried_pct")
# the lane thread's CPU seconds by push stage (thirty-sixth session): "cpu %" columns, each
# stage's CPU time over its wall time, where a run has them
CPU_STAGES = ("decode", "preprocess", "postprocess", *POST, "total")
# the CUDA caching allocator's events (thirty-sixth session), summed over replicas
ALLOCATOR = ("num_device_alloc", "num_device_free", "num_alloc_retries")


def read_metrics(path: Path) -> dict[str, float]:
    """The counters this report needs from one Prometheus text snapshot."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            if (sample.name == "ttball_push_seconds_sum"
                    and sample.labels.get("stage") in (*STAGES, *POST)):  # POST: their CPU shares
                key = f"push_{sample.labels['stage']}"
            elif (sample.name == "ttball_push_cpu_seconds_total"
                  and sample.labels.get("stage") in CPU_STAGES):
                key = f"cpu_{sample.labels['stage']}"
            elif (sample.name == "ttball_flush_seconds_total"
                  and sample.labels.get("stage") in FLUSH):
                key = f"flush_{sample.labels['stage']}"
            elif (sample.name == "ttball_cuda_allocator_events"
                  and sample.labels.get("event") in ALLOCATOR):
                key = sample.labels["event"]
            elif sample.name in COUNTERS:
                key = sample.name.removeprefix("ttball_")
            else:
                continue
            out[key] = out.get(key, 0.0) + sample.value  # summed over replicas
    return out


def read_histograms(path: Path) -> dict[str, dict[float | str, float]]:
    """The :data:`HISTOGRAMS` of one snapshot file (see :func:`histograms`)."""
    return histograms(path.read_text())


def histograms(text: str) -> dict[str, dict[float | str, float]]:
    """The :data:`HISTOGRAMS` of one Prometheus text, summed over replicas: per label, the
    cumulative count at each bucket's upper edge (``le``), and ``"sum"`` and ``"count"``."""
    return replica_histograms(text, by_replica=False).get("", {})


def replica_histograms(text: str, by_replica: bool = True
                       ) -> dict[str, dict[str, dict[float | str, float]]]:
    """:func:`histograms` of each replica, by its ``replica`` label ("" for a sample without
    one), with ``frames`` (``ttball_frames_total``) and ``gpu_network`` (the network's GPU
    seconds, ``ttball_flush_seconds_total{stage="gpu_network"}``) as series of their own
    (``"sum"``); with
    ``by_replica`` False, every sample under "". With ``by_replica``, each lane of a replica
    too, under ``"<replica> lane <n>"`` (``ttball_lane_stay_seconds`` as ``stay``,
    ``ttball_lane_batch_jobs`` as ``push_frames`` and its jobs as ``frames``: in the device
    pipeline a job is an upload, one frame under the load test)."""
    wanted = {(metric, stage): label for label, metric, stage in (*HISTOGRAMS, PUSH_FRAMES)}
    out: dict[str, dict[str, dict[float | str, float]]] = {}

    def add(name: str, label: str, key: float | str, value: float) -> None:
        series = out.setdefault(name, {}).setdefault(label, {})
        series[key] = series.get(key, 0.0) + value

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            replica = sample.labels.get("replica", "") if by_replica else ""
            if sample.name == "ttball_frames_total":
                if by_replica:
                    add(replica, "frames", "sum", sample.value)
                continue
            if (sample.name == "ttball_flush_seconds_total"
                    and sample.labels.get("stage") == "gpu_network"):
                if by_replica:  # the network's GPU time of the calls its flushes read back
                    add(replica, "gpu_network", "sum", sample.value)
                continue
            for suffix in ("_bucket", "_sum", "_count"):
                if sample.name.endswith(suffix):
                    metric = sample.name.removesuffix(suffix)
                    break
            else:
                continue
            key: float | str = float(sample.labels["le"]) if suffix == "_bucket" else suffix[1:]
            if metric in LANE_METRICS:
                if by_replica:
                    name = f"{replica} lane {sample.labels.get('lane', '')}".strip()
                    add(name, LANE_METRICS[metric], key, sample.value)
                    if metric == "ttball_lane_batch_jobs" and suffix == "_sum":
                        add(name, "frames", "sum", sample.value)
                continue
            label = wanted.get((metric, sample.labels.get("stage")))
            if label is not None:
                add(replica, label, key, sample.value)
    return out


def quantile(q: float, buckets: dict[float | str, float]) -> float:
    """The ``q`` quantile of a histogram's cumulative ``{le: count}`` (other keys ignored),
    linear within its bucket; NaN when empty, the last finite edge when it lies in ``+Inf``."""
    edges = sorted((le, n) for le, n in buckets.items() if isinstance(le, float))
    total = edges[-1][1] if edges else 0.0
    if total <= 0:
        return float("nan")
    rank, low, below = q * total, 0.0, 0.0
    for le, n in edges:
        if n >= rank:
            if le == float("inf"):
                return low
            return low + (le - low) * ((rank - below) / (n - below) if n > below else 1.0)
        low, below = le, n
    return low


def stage_quantiles(folder: Path) -> list[dict[str, float]]:
    """One row per run in ``folder``, as :func:`runs`: for each of :data:`HISTOGRAMS`, its
    mean and :data:`QUANTILES` in milliseconds over that run's observations; ``frames_a_push``
    (the mean push's frames), ``lanes_busy`` (:func:`lanes_busy`), ``children_busy``
    (:func:`children_busy`), ``network_busy`` (the share of a lane's time its network ran on
    the GPU: ``gpu_network`` over lanes × the load's active seconds; NaN without it),
    ``lanes_idle`` (the share of a lane's time in its idle work, the flush with overlap: a lane
    is occupied ``lanes_busy`` + ``lanes_idle`` of the time) and ``waited`` (the share of the
    batches gathered on a free lane that waited for company longer than the first bucket,
    0.5 ms; the others found their company queued or their oldest job late already; NaN
    without the stage)."""
    rows = []
    for replicas, sessions, _, delta in snapshot_deltas(folder, read_histograms):
        row = {"replicas": float(replicas), "sessions": float(sessions)}
        frames = delta.get(PUSH_FRAMES[0], {})
        row["frames_a_push"] = (frames.get("sum", 0.0) / frames["count"] if frames.get("count")
                                else float("nan"))
        row["lanes_busy"] = lanes_busy(folder, replicas, sessions,
                                       delta.get("push", {}).get("sum", 0.0))
        row["children_busy"] = children_busy(
            folder, replicas, sessions,
            sum(delta.get(label, {}).get("sum", 0.0) for label in ("decode_child", "decode_fill")))
        idle, gather = delta.get("idle", {}), delta.get("gather", {})
        row["lanes_idle"] = (idle.get("sum", 0.0) / _lane_seconds(folder, replicas, sessions)
                             if idle.get("count") else float("nan"))
        row["waited"] = (1.0 - gather.get(NO_WAIT_S, 0.0) / gather["count"]
                         if gather.get("count") else float("nan"))
        network = delta.get("gpu_network", {}).get("sum", 0.0)
        row["network_busy"] = (network / _lane_seconds(folder, replicas, sessions) if network
                               else float("nan"))
        for label, _, _ in HISTOGRAMS:
            series = delta.get(label, {})
            count = series.get("count", 0.0)
            row[f"{label}_n"] = count
            row[f"{label}_mean"] = 1e3 * series.get("sum", 0.0) / count if count else float("nan")
            for q in QUANTILES:
                row[f"{label}_p{round(100 * q)}"] = 1e3 * quantile(q, series)
        rows.append(row)
    return rows


def lanes_busy(folder: Path, replicas: int, sessions: int, push_seconds: float) -> float:
    """The share of its lanes' time a run spent in pushes: ``push_seconds`` (all lanes and
    replicas) over lanes × the load's active seconds, from the files beside the snapshots
    (``ready-R.json``'s lanes a replica × its replicas, ``loadtest-R-S.json``'s ``active_s``;
    Ray runs only). Near 1 at saturation a lane never waits for work; well under it, the lanes
    wait between pushes (for the event loop, the batcher). NaN without those files."""
    return push_seconds / _lane_seconds(folder, replicas, sessions)


def children_busy(folder: Path, replicas: int, sessions: int, child_seconds: float) -> float:
    """With ``--decode-processes``: the share of its time a lane's slowest decode child spent
    decoding and filling its slot (``decode_child`` + ``decode_fill``, summed over lanes and
    replicas, over lanes × the load's active seconds, as :func:`lanes_busy`). Well under 1 at
    saturation, the children idle between one request and the next (what ``--decode-early``
    is for); NaN without the files or the stages."""
    return child_seconds / _lane_seconds(folder, replicas, sessions) if child_seconds else float("nan")


def _lane_seconds(folder: Path, replicas: int, sessions: int) -> float:
    """Lanes × the load's active seconds (see :func:`lanes_busy`); NaN without the files."""
    ready, load = folder / f"ready-{replicas}.json", folder / f"loadtest-{replicas}-{sessions}.json"
    if not replicas or not ready.exists() or not load.exists():
        return float("nan")
    try:
        state, report = json.loads(ready.read_text()), json.loads(load.read_text())
        lanes = (state.get("device_pipeline") or {}).get("lanes") or 1
        per = len(state.get("replicas") or []) or replicas
        active = float(report["active_s"])
    except (ValueError, KeyError, TypeError, AttributeError):  # a partial or empty file
        return float("nan")
    return lanes * per * active if active > 0 else float("nan")


def snapshot_deltas(folder: Path, read: Callable[[Path], dict[str, Any]]
                    ) -> Iterator[tuple[int, int, dict[str, Any], dict[str, Any]]]:
    """``(replicas, sessions, now, delta)`` for each load's snapshot in ``folder``, by
    replicas, then in the order the loads ran: ``now`` as ``read`` reads it, ``delta`` that
    less the snapshot before it of the same server (each replica count is a server of its
    own: its first from zero). The order is the frames each snapshot counts (a counter only
    grows), not the session count: a load test may run its loads in any order (call30.sh
    ran 80, 72, 68, 64 sessions). A snapshot at 0 sessions (taken once the server was ready:
    the warm-up's pushes) is only subtracted, not yielded."""
    before: dict[str, Any] = {}
    server = None
    for path in sorted(folder.glob("metrics-*.txt"), key=_run_order):
        replicas, sessions = _counts(path)
        if replicas != server:
            before, server = {}, replicas
        now = read(path)
        delta, before = _minus(now, before), now
        if sessions:
            yield replicas, sessions, now, delta


def _minus(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """``now`` less ``before`` key by key, nested dicts in turn; a key ``before`` lacks counts
    from zero."""
    return {k: _minus(v, before.get(k, {})) if isinstance(v, dict) else v - before.get(k, 0.0)
            for k, v in now.items()}


def _run_order(path: Path) -> tuple[int, float, int]:
    """A snapshot's place: its server (replicas), then the frames that server had accepted
    by then (``ttball_frames_total`` summed over its replicas: a counter only grows), then
    its session count (for snapshots without the counter)."""
    replicas, sessions = _counts(path)
    frames = sum(float(line.rsplit(" ", 1)[1]) for line in path.read_text().splitlines()
                 if line.startswith("ttball_frames_total"))
    return replicas, frames, sessions


def _counts(path: Path) -> tuple[int, int]:
    """``(replicas, sessions)`` of ``metrics-S.txt`` (replicas 0: one server) or
    ``metrics-R-S.txt``."""
    parts = [int(p) for p in path.stem.split("-")[1:]]
    return (0, parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def flush_costs(folder: Path) -> list[dict[str, float]]:
    """One row per run in ``folder``, as :func:`runs`: ``flushes`` (the lanes' idle calls),
    ``idle_ms`` (a flush as the event loop sees it, the hand-offs to the lane's thread and back
    included, or on the thread itself with ``--flush-after-push``), each of :data:`FLUSH`'s ms
    a flush (``call_ms``: the flush on its thread), ``handoff_ms`` (``idle_ms`` less
    ``call_ms``), ``push_ms`` (a push on its thread), ``batch_ms`` (a batch as the loop sees
    it), ``thread_ms`` (a batch on its thread, the push and the runner's own work around it),
    ``batch_less_push_ms`` and ``batch_handoff_ms`` (``batch_ms`` less ``thread_ms``: the
    batch's hand-offs). NaN where a run has no flushes or pushes (or no such stage)."""
    nan = float("nan")
    rows = []
    for counters, spread in zip(runs(folder), stage_quantiles(folder)):
        flushes = spread["idle_n"]
        row = {"replicas": counters["replicas"], "sessions": counters["sessions"],
               "flushes": flushes, "idle_ms": spread["idle_mean"]}
        frames = counters["frames"]
        for stage in FLUSH:  # ms a frame → ms a flush
            key = f"flush_{stage}_ms"
            row[f"{stage}_ms"] = (counters[key] * frames / flushes
                                  if key in counters and flushes else nan)
        row["handoff_ms"] = row["idle_ms"] - row["call_ms"]
        row["push_ms"], row["batch_ms"] = spread["push_mean"], spread["batch_mean"]
        row["thread_ms"] = spread["thread_mean"]
        row["batch_less_push_ms"] = row["batch_ms"] - row["push_ms"]
        row["batch_handoff_ms"] = row["batch_ms"] - row["thread_ms"]
        rows.append(row)
    return rows


def _print_flushes(folder: Path) -> None:
    rows = flush_costs(folder)
    head = ["replicas", "sessions", "flushes", "idle_ms", *(f"{s}_ms" for s in FLUSH),
            "handoff_ms", "push_ms", "batch_ms", "thread_ms", "batch_less_push_ms",
            "batch_handoff_ms"]
    head = [h for h in head if h in ("replicas", "sessions", "flushes")
            or any(row[h] == row[h] for row in rows)]  # columns some run has (not all NaN)
    print(f"{folder}: ms a flush (all lanes and replicas); idle: a flush as the event loop sees "
          "it; call: on its thread; handoff: idle less call; push, batch, thread: a push on its "
          "thread, a batch as the loop sees it and on its thread; batch_handoff: batch less "
          "thread")
    print("  " + " ".join(f"{h.removesuffix('_ms'):>12}" for h in head))
    for row in rows:
        print("  " + " ".join(f"{row[h]:12.0f}" if h in ("replicas", "sessions", "flushes")
                              else f"{row[h]:12.3f}" for h in head))


def load_states(folder: Path) -> list[dict[str, object]]:
    """One row per load in ``folder`` (a Ray load test's), the figures that tell its state
    apart (fifty-fifth session: fast, ~2.1 frames a push; slow, ~2.6-2.9): the client's p99
    (``loadtest-R-S.json``), the live settings it ran under (``live-R-S.json``, ``LIVE_<s>``;
    None without), frames a push, the push's and its decode and preprocess stages' mean ms, the stay's
    mean, and per flush its GPU work (``gpu_*`` ms a flush: the calls it read back) and
    hand-offs (:func:`flush_costs`)."""
    rows: list[dict[str, object]] = []
    for flush, spread in zip(flush_costs(folder), stage_quantiles(folder)):
        replicas, sessions = int(flush["replicas"]), int(flush["sessions"])
        row: dict[str, object] = {"replicas": replicas, "sessions": sessions}
        try:
            report = json.loads((folder / f"loadtest-{replicas}-{sessions}.json").read_text())
            row["p99"] = float(report["latency_ms"]["p99"])
        except (OSError, ValueError, KeyError, TypeError):
            row["p99"] = float("nan")
        settings = replica_settings(folder / f"live-{replicas}-{sessions}.json")
        common = None if settings is None else agreed(settings)
        row["live"] = None if settings is None else "differ" if common is None else common
        row["frames_a_push"] = spread["frames_a_push"]
        for label in ("gather", "push", "decode", "preprocess", "stay"):
            row[f"{label}_ms"] = spread[f"{label}_mean"]
        for stage in (*GPU, "post_wait"):
            row[f"{stage}_ms"] = flush[f"{stage}_ms"]
        row["handoff_ms"] = flush["handoff_ms"]
        rows.append(row)
    return rows


def replica_loads(folder: Path) -> list[dict[str, float | str]]:
    """``--replicas``: one row per load and replica of a Ray load test's folder (the snapshots'
    differences, as :func:`stage_quantiles`): ``sessions`` (the replica's frames over the
    load's active seconds × each session's frames a second, ``loadtest-R-S.json``; NaN without
    it), ``frames_a_push``, and the stay's mean and p99 in ms (``ttball_window_seconds``: a
    window's time in the worker, upload to rows), and ``network_us``, the network's GPU time a
    frame in µs (NaN for a lane, or without the flushes' GPU times): the same in every replica
    when the GPU slows them all, as in the fifty-ninth session's slow loads. Replicas differ
    in their share of the sessions (64 over six: 10 or 11), and a lane with more sessions
    batches more frames a push."""
    rows: list[dict[str, float | str]] = []
    for replicas, sessions, _, delta in snapshot_deltas(
            folder, lambda path: replica_histograms(path.read_text())):
        try:
            report = json.loads((folder / f"loadtest-{replicas}-{sessions}.json").read_text())
            per_second = float(report["active_s"]) * float(report["fps_per_session"])
        except (OSError, ValueError, KeyError, TypeError):
            per_second = float("nan")
        for name, got in sorted(delta.items()):
            frames, stay = got.get("push_frames", {}), got.get("stay", {})
            served = got.get("frames", {}).get("sum", 0.0)
            network = got.get("gpu_network", {}).get("sum", 0.0)
            rows.append({
                "replicas": float(replicas), "load": float(sessions), "replica": name,
                "kind": "lane" if " lane " in f" {name}" else "replica",
                "sessions": served / per_second,
                "frames_a_push": (frames.get("sum", 0.0) / frames["count"]
                                  if frames.get("count") else float("nan")),
                "stay_mean": (1e3 * stay.get("sum", 0.0) / stay["count"] if stay.get("count")
                              else float("nan")),
                "stay_p99": 1e3 * quantile(0.99, stay),
                "network_us": 1e6 * network / served if network and served else float("nan")})
    return rows


def share_differences(loads: list[list[dict[str, float | str]]]) -> dict[str, list[float]]:
    """Within each load (its :func:`replica_loads` rows) whose replicas had two shares of the
    sessions (rounded), the replicas with the larger share less those with the smaller, in
    ``frames_a_push``, ``stay_mean`` and ``stay_p99`` (means over each share's replicas): a
    list of differences per figure, a load each. Loads of one share are left out."""
    out: dict[str, list[float]] = {h: [] for h in ("frames_a_push", "stay_mean", "stay_p99")}
    for rows in loads:
        shares = sorted({round(float(r["sessions"])) for r in rows
                         if math.isfinite(float(r["sessions"]))})
        if len(shares) != 2:
            continue
        low, high = ([r for r in rows if math.isfinite(float(r["sessions"]))
                      and round(float(r["sessions"])) == share] for share in shares)
        for h, values in out.items():
            values.append(statistics.fmean(float(r[h]) for r in high)
                          - statistics.fmean(float(r[h]) for r in low))
    return out


def _print_replicas(folders: list[Path]) -> None:
    per_folder = [replica_loads(folder) for folder in folders]
    rows = [row for folder_rows in per_folder for row in folder_rows]
    head = ("sessions", "frames_a_push", "stay_mean", "stay_p99")
    print("a replica's (and, where the worker exports them, each lane's) share of a load: "
          "sessions (its frames over the load's; a lane's: its jobs), frames a push (a lane's: "
          "jobs a batch), its windows' stay in ms, the network's GPU time a frame in µs (a "
          "replica's, where the worker exports it); then the means by sessions (rounded), over "
          "every load and folder, and within loads whose replicas (lanes) had two shares, the "
          "larger less the smaller")
    print("  " + " ".join(f"{h:>13}" for h in ("replicas", "load", *head, "network_us"))
          + "  replica")
    for row in rows:
        print("  " + " ".join(f"{float(row[h]):13.0f}" for h in ("replicas", "load"))
              + " " + " ".join(f"{float(row[h]):13.2f}" for h in (*head, "network_us"))
              + f"  {row['replica']}")
    for kind in ("replica", "lane"):
        of_kind = [row for row in rows if row["kind"] == kind]
        shares = sorted({round(float(row["sessions"])) for row in of_kind
                         if math.isfinite(float(row["sessions"]))})
        for share in shares:
            group = [row for row in of_kind if math.isfinite(float(row["sessions"]))
                     and round(float(row["sessions"])) == share]
            means = [statistics.fmean(float(row[h]) for row in group) for h in head[1:]]
            print(f"  {share:13d} sessions: {len(group)} {kind}-loads, frames a push "
                  f"{means[0]:.2f}, stay mean {means[1]:.2f} ms, stay p99 {means[2]:.1f} ms")
        loads = [[r for r in folder_rows if r["load"] == load and r["kind"] == kind]
                 for folder_rows in per_folder
                 for load in dict.fromkeys(r["load"] for r in folder_rows)]
        within = share_differences(loads)
        if within["stay_mean"]:
            print(f"  within {len(within['stay_mean'])} loads, the {kind}s with the larger share "
                  "less the smaller: "
                  + ", ".join(f"{h} {statistics.fmean(v):+.2f} (sd {_stdev(v):.2f})"
                              for h, v in within.items()))


def _print_loads(folder: Path) -> None:
    rows = load_states(folder)
    head = ["replicas", "sessions", "p99", "frames_a_push", "gather_ms", "push_ms",
            "decode_ms", "preprocess_ms", "stay_ms", *(f"{s}_ms" for s in (*GPU, "post_wait")), "handoff_ms"]
    print(f"{folder}: a load a row; p99: the client's, ms; gather (a batch's wait for company), "
          "push, its decode and preprocess stages, stay: mean ms; "
          "gpu_*, post_wait, handoff: ms a flush; live: the settings it ran under")
    print("  " + " ".join(f"{h.removesuffix('_ms'):>13}" for h in head) + "  live")
    for row in rows:
        cells = [f"{row[h]:13.0f}" if h in ("replicas", "sessions") else f"{row[h]:13.3f}"
                 for h in head]
        live = row["live"]
        print("  " + " ".join(cells) + "  " + (json.dumps(live, sort_keys=True)
                                              if isinstance(live, dict) else str(live or "")))


def runs(folder: Path) -> list[dict[str, float]]:
    """One row per snapshot in ``folder``, by replicas then sessions: frames, windows a
    backend call, and each push stage's milliseconds a frame."""
    rows = []
    for replicas, sessions, now, delta in snapshot_deltas(folder, read_metrics):
        frames = delta.get("frames_total", 0.0)
        calls = delta.get("batch_size_count", 0.0)
        windows = delta.get("windows_total", 0.0)
        row = {"replicas": float(replicas), "sessions": float(sessions), "frames": frames,
               "windows_a_call": windows / calls if calls else 0.0}
        for column, counter in zip(BATCHING, ("batch_padding_total", "windows_carried_total")):
            if counter in now:
                row[column] = 100 * delta[counter] / windows if windows else 0.0
        for stage in STAGES:
            seconds = delta.get(f"push_{stage}", 0.0)
            row[f"{stage}_ms"] = 1e3 * seconds / frames if frames else 0.0
        for stage in CPU_STAGES:
            if f"cpu_{stage}" in now:
                wall = delta.get(f"push_{stage}", 0.0)
                row[f"{stage}_cpu_pct"] = 100 * delta[f"cpu_{stage}"] / wall if wall else 0.0
        for stage in FLUSH:
            if f"flush_{stage}" in now:
                row[f"flush_{stage}_ms"] = 1e3 * delta[f"flush_{stage}"] / frames if frames else 0.0
        for event in ALLOCATOR:
            if event in now:
                row[event] = delta[event]
        rows.append(row)
    return rows


def paired(folders: list[Path]) -> list[dict[str, object]]:
    """``--pairs``: one row per start (a Ray load test's folder, :func:`load_states`) whose
    loads ran under two live settings: A, its first load's, and B, the other. Each of
    :data:`PAIRED` as B's loads' mean less A's (``d_<figure>``; loads run A B B A put both at
    the same mean position, so a drift over the start cancels), ``drift_p99`` (A's last load
    less its first: what the start did by itself), and ``a`` / ``b``, the settings that differ.
    ValueError for a start whose loads ran under one setting (or none) or more than two."""
    rows: list[dict[str, object]] = []
    for folder in folders:
        loads = load_states(folder)
        kinds = [json.dumps(load["live"], sort_keys=True) for load in loads]
        if not loads or any(not isinstance(load["live"], dict) for load in loads) or \
                len(set(kinds)) != 2:
            raise ValueError(f"{folder}: its loads ran under {len(set(kinds))} live settings "
                             "(or without --live-settings); --pairs needs two")
        first, other = loads[0]["live"], next(load["live"] for load in loads
                                              if load["live"] != loads[0]["live"])
        assert isinstance(first, dict) and isinstance(other, dict)
        a = [load for load in loads if load["live"] == first]
        b = [load for load in loads if load["live"] == other]
        changed = sorted(k for k in first.keys() | other.keys() if first.get(k) != other.get(k))
        row: dict[str, object] = {"start": str(folder),
                                  "a": {k: first.get(k) for k in changed},
                                  "b": {k: other.get(k) for k in changed}}
        for figure in PAIRED:
            row[f"d_{figure}"] = (statistics.fmean(_number(x[figure]) for x in b)
                                  - statistics.fmean(_number(x[figure]) for x in a))
        row["drift_p99"] = _number(a[-1]["p99"]) - _number(a[0]["p99"])
        rows.append(row)
    return rows


def _number(value: object) -> float:
    """A figure of :func:`load_states` or :func:`paired` (their rows also hold settings)."""
    assert isinstance(value, int | float), value
    return float(value)


def _stdev(values: list[float]) -> float:
    """The sample standard deviation; NaN for fewer than two values or where one is
    (``statistics.stdev`` raises)."""
    return (statistics.stdev(values) if len(values) > 1 and all(math.isfinite(v) for v in values)
            else float("nan"))


def _print_pairs(folders: list[Path]) -> None:
    rows = paired(folders)
    head = [f"d_{figure}" for figure in PAIRED] + ["drift_p99"]
    print("B's loads less A's within each start (mean over each setting's loads); p99: the "
          "client's, ms; gather, push, stay: mean ms; gpu_network, handoff: ms a flush; "
          "drift_p99: A's last load less its first")
    print("  " + " ".join(f"{h.removeprefix('d_').removesuffix('_ms'):>13}" for h in head)
          + "  A -> B  start")

    def change(row: dict[str, object]) -> str:
        return f"{json.dumps(row['a'], sort_keys=True)} -> {json.dumps(row['b'], sort_keys=True)}"

    for row in rows:
        print("  " + " ".join(f"{_number(row[h]):13.3f}" for h in head)
              + f"  {change(row)}  {row['start']}")
    for key in dict.fromkeys(change(row) for row in rows):
        group = [row for row in rows if change(row) == key]
        means = [statistics.fmean(_number(r[h]) for r in group) for h in head]
        print("  " + " ".join(f"{m:13.3f}" for m in means) + f"  {key}  mean of {len(group)}")
        if len(group) > 1:
            spreads = [_stdev([_number(r[h]) for r in group]) for h in head]
            print("  " + " ".join(f"{s:13.3f}" for s in spreads) + f"  {key}  sd")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="a load test's serve/ folder")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--quantiles", action="store_true",
                       help="a job's stay, its queue wait and its push: mean, p50, p95, p99 ms")
    shown.add_argument("--flushes", action="store_true",
                       help="ms a flush by part, beside the push and the batch as the event "
                            "loop sees them")
    shown.add_argument("--loads", action="store_true",
                       help="a load a row: the client's p99, its live settings, frames a push, "
                            "push and stay, the flushes' GPU work (a Ray load test's folder)")
    shown.add_argument("--pairs", action="store_true",
                       help="each folder a start whose loads ran under two live settings "
                            "(A B B A): B's loads less A's, a start a row, and their mean")
    shown.add_argument("--replicas", action="store_true",
                       help="a replica a row per load: its share of the sessions, frames a "
                            "push, its windows' stay; then the means by share")
    args = parser.parse_args()
    for folder in args.folders:
        if not any(folder.glob("metrics-*.txt")):
            parser.error(f"{folder}: no metrics-N.txt snapshots")
    if args.replicas:
        _print_replicas(args.folders)
        return
    if args.pairs:
        try:
            _print_pairs(args.folders)
        except ValueError as exc:
            parser.error(str(exc))
        return
    for folder in args.folders:
        if args.quantiles:
            _print_quantiles(folder)
            continue
        if args.flushes:
            _print_flushes(folder)
            continue
        if args.loads:
            _print_loads(folder)
            continue
        rows = runs(folder)
        ray = any(row["replicas"] for row in rows)
        head = (["replicas"] if ray else []) + ["sessions", "frames", "windows_a_call"]
        head += [h for h in BATCHING if any(h in row for row in rows)]
        head += [f"{s}_ms" for s in STAGES]
        head += [h for h in (*(f"{s}_cpu_pct" for s in CPU_STAGES),
                             *(f"flush_{s}_ms" for s in FLUSH), *ALLOCATOR)
                 if any(h in row for row in rows)]
        print(f"{folder}: push stages, host ms a frame (all lanes{' and replicas' if ray else ''}"
              " summed); padded_pct, carried_pct: the network's padding rows and the windows"
              " carried to the next push, % of the windows run; *_cpu_pct: the lane thread's"
              " CPU time in a stage over its wall time; flush_*_ms: the flushes' stages, ms a"
              " frame; num_*: the CUDA caching allocator's"
              " cudaMalloc, cudaFree and retries")
        print("  " + " ".join(f"{h:>14}" for h in head))
        for row in rows:
            cells = [f"{row.get(h, float('nan')):14.1f}" if h in BATCHING
                     else f"{row.get(h, float('nan')):14.0f}"
                     if h in ("replicas", "sessions", "frames", *ALLOCATOR) or h.endswith("_pct")
                     else f"{row[h]:14.3f}" for h in head]
            print("  " + " ".join(cells))


def _print_quantiles(folder: Path) -> None:
    rows = stage_quantiles(folder)
    shown = [label for label, _, _ in HISTOGRAMS
             if label not in (*OPTIONAL, *LANE, *(a for a, _, _ in ARRIVAL))
             or any(row[f"{label}_n"] for row in rows)]
    children, gpu = "decode_child" in shown, "gpu_network" in shown
    lane = "idle" in shown or "gather" in shown
    print(f"{folder}: ms, mean / p50 / p95 / p99 (upper edges of 2-50 ms buckets; all lanes "
          "and replicas); fr/push: frames a push, mean; busy %: the lanes' time in pushes"
          + ("; kids %: a lane's slowest decode child's time decoding and filling" if children
             else "")
          + ("; net %: a lane's time with its network running on the GPU; gpu_*: a push's "
             "backend calls on their stream, read back by the next push" if gpu else "")
          + ("; idle %: the lanes' time in idle work (the flush with overlap); wait %: the "
             "batches whose wait for company (gather) passed 0.5 ms" if lane else ""))
    fixed = (("replicas", "sessions", "fr/push", "busy %") + (("kids %",) if children else ())
             + (("net %",) if gpu else ()) + (("idle %", "wait %") if lane else ()))
    print("  " + " ".join(f"{h:>8}" for h in fixed) + "".join(f" {label:>24}" for label in shown))
    for row in rows:
        cells = [f"{row['replicas']:8.0f}", f"{row['sessions']:8.0f}",
                 f"{row['frames_a_push']:8.1f}", f"{100 * row['lanes_busy']:8.0f}"]
        if children:
            cells.append(f"{100 * row['children_busy']:8.0f}")
        if gpu:
            cells.append(f"{100 * row['network_busy']:8.0f}")
        if lane:
            cells += [f"{100 * row['lanes_idle']:8.0f}", f"{100 * row['waited']:8.0f}"]
        for label in shown:
            values = [row[f"{label}_mean"]] + [row[f"{label}_p{round(100 * q)}"] for q in QUANTILES]
            cells.append(" " + "/".join(f"{v:.1f}" for v in values).rjust(24))
        print("  " + " ".join(cells[:len(fixed)]) + "".join(cells[len(fixed):]))


if __name__ == "__main__":
    main()

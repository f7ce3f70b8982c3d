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
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

STAGES = ("decode", "preprocess", "network", "postprocess", "track", "total")
COUNTERS = ("ttball_frames_total", "ttball_windows_total", "ttball_batch_size_count")


def read_metrics(path: Path) -> dict[str, float]:
    """The counters this report needs from one Prometheus text snapshot."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            if sample.name == "ttball_push_seconds_sum" and sample.labels.get("stage") in STAGES:
                key = f"push_{sample.labels['stage']}"
            elif sample.name in COUNTERS:
                key = sample.name.removeprefix("ttball_")
            else:
                continue
            out[key] = out.get(key, 0.0) + sample.value  # summed over replicas
    return out


def _counts(path: Path) -> tuple[int, int]:
    """``(replicas, sessions)`` of ``metrics-S.txt`` (replicas 0: one server) or
    ``metrics-R-S.txt``."""
    parts = [int(p) for p in path.stem.split("-")[1:]]
    return (0, parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def runs(folder: Path) -> list[dict[str, float]]:
    """One row per snapshot in ``folder``, by replicas then sessions: frames, windows a
    backend call, and each push stage's milliseconds a frame."""
    snapshots = sorted(folder.glob("metrics-*.txt"), key=_counts)
    rows, before, server = [], {}, None
    for path in snapshots:
        replicas, sessions = _counts(path)
        if replicas != server:  # a new server: its counters start from zero
            before, server = {}, replicas
        now = read_metrics(path)
        delta = {k: v - before.get(k, 0.0) for k, v in now.items()}
        before = now
        if sessions == 0:  # taken once the server was ready: the warm-up's pushes, left out
            continue
        frames = delta.get("frames_total", 0.0)
        calls = delta.get("batch_size_count", 0.0)
        row = {"replicas": float(replicas), "sessions": float(sessions), "frames": frames,
               "windows_a_call": delta.get("windows_total", 0.0) / calls if calls else 0.0}
        for stage in STAGES:
            seconds = delta.get(f"push_{stage}", 0.0)
            row[f"{stage}_ms"] = 1e3 * seconds / frames if frames else 0.0
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="a load test's serve/ folder")
    args = parser.parse_args()
    for folder in args.folders:
        if not any(folder.glob("metrics-*.txt")):
            parser.error(f"{folder}: no metrics-N.txt snapshots")
        rows = runs(folder)
        ray = any(row["replicas"] for row in rows)
        head = (["replicas"] if ray else []) + ["sessions", "frames", "windows_a_call"]
        head += [f"{s}_ms" for s in STAGES]
        print(f"{folder}: push stages, host ms a frame (all lanes{' and replicas' if ray else ''}"
              " summed)")
        print("  " + " ".join(f"{h:>14}" for h in head))
        for row in rows:
            cells = [f"{row[h]:14.0f}" if h in ("replicas", "sessions", "frames")
                     else f"{row[h]:14.3f}" for h in head]
            print("  " + " ".join(cells))


if __name__ == "__main__":
    main()

"""Per load-test run of ``scripts/gpu_serve_loadtest.sh``: the device pipeline's host time a
frame, by push stage, from the ``/metrics`` snapshot taken after each run.

The snapshots are cumulative, so each run's figures are the difference from the run before
(the first run's from zero). Push stages are summed over every lane: with two lanes a stage
that takes 0.1 ms a frame on each thread reads 0.1 here, as with one, unless the lanes slow
each other (their threads share one interpreter lock)::

    python scripts/serve_push_costs.py OUT/serve [OUT/serve ...]
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
                out[f"push_{sample.labels['stage']}"] = sample.value
            elif sample.name in COUNTERS:
                out[sample.name.removeprefix("ttball_")] = sample.value
    return out


def runs(folder: Path) -> list[dict[str, float]]:
    """One row per ``metrics-N.txt`` in ``folder``, N ascending: sessions, frames, windows a
    backend call, and each push stage's milliseconds a frame."""
    snapshots = sorted(folder.glob("metrics-*.txt"), key=lambda p: int(p.stem.split("-")[1]))
    rows, before = [], {}
    for path in snapshots:
        now = read_metrics(path)
        delta = {k: v - before.get(k, 0.0) for k, v in now.items()}
        before = now
        frames = delta.get("frames_total", 0.0)
        calls = delta.get("batch_size_count", 0.0)
        row = {"sessions": float(path.stem.split("-")[1]), "frames": frames,
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
    head = ["sessions", "frames", "windows_a_call"] + [f"{s}_ms" for s in STAGES]
    for folder in args.folders:
        if not any(folder.glob("metrics-*.txt")):
            parser.error(f"{folder}: no metrics-N.txt snapshots")
        print(f"{folder}: push stages, host ms a frame (all lanes summed)")
        print("  " + " ".join(f"{h:>14}" for h in head))
        for row in runs(folder):
            cells = [f"{row[h]:14.0f}" if h in ("sessions", "frames") else f"{row[h]:14.3f}"
                     for h in head]
            print("  " + " ".join(cells))


if __name__ == "__main__":
    main()

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
import re
from pathlib import Path

STAGES = ("decode", "preprocess", "network", "postprocess", "track", "total")
_SAMPLE = re.compile(r'^(ttball_[a-z_]+)(?:\{stage="([a-z]+)"\})? ([0-9.e+-]+)$')


def read_metrics(path: Path) -> dict[str, float]:
    """The counters this report needs from one Prometheus text snapshot."""
    out: dict[str, float] = {}
    for line in path.read_text().splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, stage, value = match.groups()
        if name == "ttball_push_seconds_sum" and stage in STAGES:
            out[f"push_{stage}"] = float(value)
        elif name in ("ttball_frames_total", "ttball_windows_total", "ttball_batch_size_count"):
            out[name.removeprefix("ttball_")] = float(value)
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

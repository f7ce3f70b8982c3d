"""How fast triton-fp16-branches could be, from each step's device time run alone (issue 9).

Reads a ``gpu_kernels.py`` result (its ``steps`` stage: every step of the plan timed alone at
one batch size) and replays the plan as ``TritonExecutor(branches=True)`` orders it: each step
on the stream of its output's resolution level, after its stream's previous step and after
the steps :func:`ttball.kernels.buffers.hazards` says it must wait for. With unlimited SMs
that schedule would finish after the **critical path**; the serial sum is what triton-fp16
runs. A measured graph between the two shows how much concurrent steps slow each other down.
Runs on the CPU.

    PYTHONPATH=. python scripts/critical_path.py docs/benchmarks/h200-2026-12-01/kernels-b1.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttball.kernels import build_plan
from ttball.kernels.buffers import Buffers, hazards, main_output
from ttball.kernels.plan import INPUT, LEVELS, Plan
from ttball.model import BlurBall


def load_steps(path: Path, batch: int) -> tuple[dict[int, float], dict[int, str]]:
    """Step index → median device time in µs at ``batch``, and → the step's name."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        rows = json.load(f)["steps"]["rows"]
    rows = [r for r in rows if r["batch"] == batch]
    if not rows:
        raise SystemExit(f"{path}: no steps timed at batch {batch}")
    return {r["step"]: r["median_ms"] * 1e3 for r in rows}, {r["step"]: r["name"] for r in rows}


def fold_tails(us: dict[int, float], names: dict[int, str], extra_us: float) -> dict[int, float]:
    """Step times if every block tail except the head's (the last step) ran inside the step
    after it: the tail's own time becomes ``extra_us``, the work its reader does more. Kept in
    the schedule as a step of that length, so the dependencies stay as they are."""
    last = max(us)
    return {i: extra_us if names[i].startswith("tail") and i != last else t
            for i, t in us.items()}


def schedule(plan: Plan, waits: list[list[int]], us: dict[int, float]) -> dict[str, object]:
    """Finish times of the branches schedule with unlimited SMs, and where its path runs."""
    lanes = [plan.buffers[main_output(step)].level for step in plan.steps]
    finish: list[float] = []
    before: list[int | None] = []  # the step each one waited for last (the path back)
    last_on_lane: dict[int, int] = {}
    for i, deps in enumerate(waits):
        preds = list(deps)
        if lanes[i] in last_on_lane:
            preds.append(last_on_lane[lanes[i]])
        start, prev = max(((finish[j], j) for j in preds), default=(0.0, None))
        finish.append(start + us[i])
        before.append(prev)
        last_on_lane[lanes[i]] = i
    end = max(range(len(finish)), key=finish.__getitem__)
    path, i = [], end
    while i is not None:
        path.append(i)
        i = before[i]
    path.reverse()
    lane_sums = [sum(us[i] for i in range(len(lanes)) if lanes[i] == k) for k in range(LEVELS)]
    first_side = next(i for i, k in enumerate(lanes) if k != 0)
    return {
        "serial_us": sum(us.values()),
        "critical_us": finish[end],
        "lane_us": lane_sums,
        "before_first_branch_us": sum(us[i] for i in range(first_side)),
        "path": path,
        "lanes": lanes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", type=Path, help="gpu_kernels.py JSON (.json or .json.gz)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--height", type=int, default=288)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--fold-tails", type=float, default=None, metavar="US",
                        help="what if: every block tail but the head's folded into the step that "
                             "reads its output, costing that step US more (the tail's launch and "
                             "its dependency gone)")
    args = parser.parse_args()

    plan = build_plan(BlurBall().eval())
    us, names = load_steps(args.kernels, args.batch)
    if len(us) != len(plan.steps):
        raise SystemExit(f"{args.kernels}: {len(us)} steps timed, the plan has {len(plan.steps)}")
    if args.fold_tails is not None:
        us = fold_tails(us, names, args.fold_tails)
    with torch.no_grad():
        bufs = Buffers(plan, args.batch, args.height, args.width, torch.device("cpu"))
        bufs.tensors[INPUT] = torch.empty(args.batch, args.height, args.width, 9)
    result = schedule(plan, hazards(plan, bufs), us)
    print(f"batch {args.batch}: serial sum {result['serial_us']:.0f} us, critical path "
          f"{result['critical_us']:.0f} us ({result['serial_us'] / result['critical_us']:.2f}x)")
    print(f"  steps before the first branch: {result['before_first_branch_us']:.0f} us")
    print("  per level (stream): " + ", ".join(
        f"L{k} {t:.0f} us" for k, t in enumerate(result["lane_us"])))
    print("  critical path:")
    for i in result["path"]:
        print(f"    #{i:<3} L{result['lanes'][i]}  {us[i]:6.1f} us  {names[i]}")


if __name__ == "__main__":
    main()

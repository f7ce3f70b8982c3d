"""Where a batch's time goes, by kind of step, against each step's floor (on the CPU, from
measured files): the per-step times of ``gpu_kernels.py --stages steps`` (every step alone,
the tuner's choice), optionally replaced for some steps by the best candidates that
``gpu_branches_ab.py --show-steps`` printed for one variant (a later run of the same plan),
summed per group and against the larger of each step's bytes at 4.3 TB/s and FLOPs at 760
TFLOP/s (``ttball.kernels.plan.step_cost``).

    python scripts/step_groups.py docs/benchmarks/h200-2026-12-01e/direct/kernels-steps.json.gz \\
        --batch 64 --override docs/benchmarks/h200-2026-12-01f/tail/tail-ab.json \\
        --variant branches+direct

The floors are those of the plan built without projections (``project_terms="off"``), whose
step indices both files share; the pair kernel's savings are not in per-step times.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttball.kernels import build_plan
from ttball.kernels.plan import SqueezeTail, Step, step_cost
from ttball.model import BlurBall

BANDWIDTH, FLOPS = 4.3e12, 760e12
STEM = 7  # steps 0-6: the stem, layer1 and transition1, before the first branch's blocks


def group(index: int, step: Step) -> str:
    if index < STEM:
        return "stem, layer1, transition1"
    if isinstance(step, SqueezeTail):
        return "block tails (SE, residual, fuse outputs, head)"
    t = step.terms[0]
    if len(step.terms) == 1 and t.ksize == 3 and t.stride == 1 and not step.addends:
        return "BasicBlock 3x3 convolutions"
    return "fuse and transition convolutions"


def load(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("steps", type=Path, help="gpu_kernels.py --stages steps JSON (.gz)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--height", type=int, default=288)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--override", type=Path, help="gpu_branches_ab.py JSON with candidates")
    parser.add_argument("--variant", default="branches+direct")
    parser.add_argument("--per-step", action="store_true",
                        help="also each step, largest time above its floor first")
    args = parser.parse_args()
    measured = {r["step"]: r["median_ms"] for r in load(args.steps)["steps"]["rows"]
                if r["batch"] == args.batch}
    best: dict[int, float] = {}  # the override's fastest candidate per step
    if args.override:
        for c in load(args.override).get("candidates", []):
            if c["batch"] == args.batch and c["variant"] == args.variant:
                best[c["step"]] = min(best.get(c["step"], float("inf")), c["ms"])
    measured.update(best)
    replaced = sorted(best)
    plan = build_plan(BlurBall().eval(), project_terms="off")
    missing = [i for i in range(len(plan.steps)) if i not in measured]
    if missing:
        sys.exit(f"no time for steps {missing} at batch {args.batch}")
    groups: dict[str, list[float]] = {}
    rows: list[tuple[float, int, str, float, float]] = []  # (above floor, step, what, ms, floor)
    for i, step in enumerate(plan.steps):
        cost = step_cost(plan, step, args.height, args.width)
        floor = max(cost["flops"] / FLOPS,
                    (cost["bytes_read"] + cost["bytes_written"]) / BANDWIDTH) * args.batch * 1e3
        what = (f"{step.terms[0].cin}->{step.cout} k{step.terms[0].ksize}"
                f"{' s2' if step.terms[0].stride == 2 else ''} {step.out}"
                if not isinstance(step, SqueezeTail) else f"tail of {step.y}")
        rows.append((measured[i] - floor, i, what, measured[i], floor))
        row = groups.setdefault(group(i, step), [0, 0.0, 0.0])
        row[0] += 1
        row[1] += measured[i]
        row[2] += floor
    print(f"batch {args.batch}, steps alone"
          + (f" (steps {replaced} from {args.override.name})" if replaced else ""))
    print("| group | steps | ms | floor ms | x floor |\n|---|---|---|---|---|")
    total = [0, 0.0, 0.0]
    for name, (n, ms, floor) in groups.items():
        print(f"| {name} | {n} | {ms:.2f} | {floor:.2f} | {ms / floor:.2f} |")
        total = [total[0] + n, total[1] + ms, total[2] + floor]
    print(f"| sum | {total[0]} | {total[1]:.2f} | {total[2]:.2f} | {total[1] / total[2]:.2f} |")
    if args.per_step:
        print("\n| step | what | ms | floor ms | x floor | above floor ms |\n|---|---|---|---|---|---|")
        for above, i, what, ms, floor in sorted(rows, reverse=True):
            print(f"| {i} | {what} | {ms:.3f} | {floor:.3f} | {ms / floor:.2f} | {above:.3f} |")


if __name__ == "__main__":
    main()

"""Count first (issue 9): the bytes a window would stop moving if each residual block's two
3×3 convolutions ran in one kernel, keeping the first one's output on chip.

A pair is a conv step whose output has exactly one reader, itself a one-term 3×3 stride-1
conv step; its intermediate is written once and read once in FP16. Runs on the CPU.

    PYTHONPATH=. python scripts/plan_fusion_count.py [--height 288 --width 512]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttball.kernels import build_plan, plan_cost
from ttball.kernels.buffers import reads_of
from ttball.kernels.plan import Conv, Plan
from ttball.model import BlurBall

BANDWIDTH = 4.2e12  # bytes/s, the H200's measured copy rate (triton-h200.md)


def readers(plan: Plan) -> dict[str, list[int]]:
    """Buffer name → the steps that read it."""
    out: dict[str, list[int]] = {}
    for i, step in enumerate(plan.steps):
        for name in reads_of(step):
            out.setdefault(name, []).append(i)
    return out


def is_3x3(step: object) -> bool:
    return (isinstance(step, Conv) and len(step.terms) == 1 and step.terms[0].ksize == 3
            and step.terms[0].stride == 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--height", type=int, default=288)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    plan = build_plan(BlurBall().eval())
    cost = plan_cost(plan, args.height, args.width)
    total = cost["bytes_read"] + cost["bytes_written"]
    who = readers(plan)
    pairs, saved = 0, 0
    for step in plan.steps:
        after = who.get(step.out, []) if isinstance(step, Conv) else []
        if is_3x3(step) and len(after) == 1 and is_3x3(plan.steps[after[0]]):
            buf = plan.buffers[step.out]
            saved += 2 * (args.height >> buf.level) * (args.width >> buf.level) * buf.channels * 2
            pairs += 1
    print(f"{pairs} conv pairs; their intermediates: {saved / 1e6:.1f} MB of {total / 1e6:.1f} MB "
          f"per window; byte floor {1e3 * total / BANDWIDTH:.3f} -> "
          f"{1e3 * (total - saved) / BANDWIDTH:.3f} ms at {BANDWIDTH / 1e12:.1f} TB/s")


if __name__ == "__main__":
    main()

"""Where a kernel's instructions and stalls are, from an Nsight Compute report (``--set full``
``--export``), on a machine without Nsight Compute: per SASS instruction its executed count
(warp level), its warp-state samples and their two main stall reasons; then the instructions
grouped by executed count, which separates a kernel's loops (one count per loop body) from its
once-a-tile code.

    pip install --target /tmp/ncurep ncu-report      # NVIDIA's report reader (PyPI)
    PYTHONPATH=/tmp/ncurep python scripts/ncu_source.py ncu-b64.ncu-rep --kernel 1 \
        --out source-step3.txt

The sixteenth session read the wgmma kernel's halo copy loop off this: a third of its
instructions and of its stall samples (docs/benchmarks/triton-h200.md).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

STALL = "smsp__pcsamp_warps_issue_stalled_"


def per_pc(action, name: str) -> dict[int, int]:
    """A source-level metric of ``action`` as {pc: value}."""
    metric = action.metric_by_name(name)
    pcs = metric.correlation_ids()
    return {pcs.as_uint64(i): metric.as_uint64(i) for i in range(metric.num_instances())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--kernel", type=int, default=0, help="index of the profiled launch")
    parser.add_argument("--out", type=Path, help="per-instruction table (default: stdout)")
    parser.add_argument("--groups", type=int, default=12, help="executed-count groups shown")
    args = parser.parse_args()
    try:
        import ncu_report
    except ImportError:
        sys.exit("ncu_source.py needs NVIDIA's ncu_report module: pip install ncu-report")
    action = ncu_report.load_report(str(args.report)).range_by_idx(0).action_by_idx(args.kernel)
    executed = per_pc(action, "inst_executed")
    samples = per_pc(action, "smsp__pcsamp_sample_count")
    reasons: dict[int, dict[str, int]] = collections.defaultdict(dict)
    for name in action.metric_names():
        if name.startswith(STALL) and not name.endswith("not_issued"):
            for pc, value in per_pc(action, name).items():
                if value:
                    reasons[pc][name.removeprefix(STALL)] = value
    total, total_samples = sum(executed.values()), sum(samples.values())
    lines = [f"# {action.name()}: {total} warp instructions, {total_samples} samples",
             "# pc executed samples instruction top-stalls"]
    for pc in sorted(set(executed) | set(samples)):
        e, s = executed.get(pc, 0), samples.get(pc, 0)
        if e or s:
            top = sorted(reasons[pc].items(), key=lambda kv: -kv[1])[:2]
            lines.append(f"{pc:x} {e} {s} {action.sass_by_pc(pc)} {top}")
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    else:
        print("\n".join(lines))
    groups: dict[int, list[int]] = collections.defaultdict(list)
    for pc, e in executed.items():
        groups[e].append(pc)
    ranked = sorted(groups.items(), key=lambda kv: -kv[0] * len(kv[1]))
    print(f"{action.name()}: {total} warp instructions, {total_samples} samples", file=sys.stderr)
    print("executed  instructions  % of instructions  % of samples", file=sys.stderr)
    for count, pcs in ranked[:args.groups]:
        share = 100 * count * len(pcs) / total
        sampled = 100 * sum(samples.get(pc, 0) for pc in pcs) / max(total_samples, 1)
        print(f"{count:>9}  {len(pcs):>12}  {share:>16.1f}  {sampled:>12.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Where a kernel's instructions and stalls are, from an Nsight Compute report (``--set full``
``--export``), on a machine without Nsight Compute: per SASS instruction its executed count
(warp level), its warp-state samples and their two main stall reasons; then the instructions
grouped by executed count, which separates a kernel's loops (one count per loop body) from its
once-a-tile code.

    pip install --target /tmp/ncurep ncu-report      # NVIDIA's report reader (PyPI)
    PYTHONPATH=/tmp/ncurep python scripts/ncu_source.py ncu-b64.ncu-rep --kernel 1 \\
        --out source-step3.txt

The sixteenth session read the wgmma kernel's halo copy loop off this: a third of its
instructions and of its stall samples (docs/benchmarks/triton-h200.md).
"""

from __future__ import annotations

import argparse
import collections
import sys
from dataclasses import dataclass, field
from pathlib import Path

STALL = "smsp__pcsamp_warps_issue_stalled_"


@dataclass
class Source:
    """One profiled kernel, per SASS instruction (keyed by its program counter)."""

    name: str
    executed: dict[int, int]
    samples: dict[int, int]
    reasons: dict[int, dict[str, int]] = field(default_factory=dict)
    sass: dict[int, str] = field(default_factory=dict)


def per_pc(action, name: str) -> dict[int, int]:
    """A source-level metric of an ``ncu_report`` action as {pc: value}."""
    metric = action.metric_by_name(name)
    pcs = metric.correlation_ids()
    return {pcs.as_uint64(i): metric.as_uint64(i) for i in range(metric.num_instances())}


def read(action) -> Source:
    """The executed counts, samples, stall reasons and SASS of an ``ncu_report`` action."""
    reasons: dict[int, dict[str, int]] = collections.defaultdict(dict)
    for name in action.metric_names():
        if name.startswith(STALL) and not name.endswith("not_issued"):
            for pc, value in per_pc(action, name).items():
                if value:
                    reasons[pc][name.removeprefix(STALL)] = value
    executed = per_pc(action, "inst_executed")
    samples = per_pc(action, "smsp__pcsamp_sample_count")
    sass = {pc: action.sass_by_pc(pc) for pc in set(executed) | set(samples)}
    return Source(action.name(), executed, samples, dict(reasons), sass)


def table(src: Source) -> list[str]:
    """One line per instruction that ran or was sampled: pc, executed, samples, SASS, the two
    main stall reasons."""
    lines = [(f"# {src.name}: {sum(src.executed.values())} warp instructions, "
              f"{sum(src.samples.values())} samples"),
             "# pc executed samples instruction top-stalls"]
    for pc in sorted(set(src.executed) | set(src.samples)):
        e, s = src.executed.get(pc, 0), src.samples.get(pc, 0)
        if e or s:
            top = sorted(src.reasons.get(pc, {}).items(), key=lambda kv: -kv[1])[:2]
            lines.append(f"{pc:x} {e} {s} {src.sass.get(pc, '?')} {top}")
    return lines


def groups(src: Source) -> list[tuple[int, int, float, float]]:
    """(executed count, instructions with it, % of all instructions, % of all samples), the
    largest share of instructions first."""
    by_count: dict[int, list[int]] = collections.defaultdict(list)
    for pc, e in src.executed.items():
        by_count[e].append(pc)
    total = max(sum(src.executed.values()), 1)
    total_samples = max(sum(src.samples.values()), 1)
    out = [(count, len(pcs), 100 * count * len(pcs) / total,
            100 * sum(src.samples.get(pc, 0) for pc in pcs) / total_samples)
           for count, pcs in by_count.items()]
    return sorted(out, key=lambda g: -g[2])


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
    report = ncu_report.load_report(str(args.report))
    src = read(report.range_by_idx(0).action_by_idx(args.kernel))
    lines = "\n".join(table(src)) + "\n"
    if args.out:
        args.out.write_text(lines)
    else:
        sys.stdout.write(lines)
    print(f"{src.name}: {sum(src.executed.values())} warp instructions, "
          f"{sum(src.samples.values())} samples", file=sys.stderr)
    print("executed  instructions  % of instructions  % of samples", file=sys.stderr)
    for count, n, share, sampled in groups(src)[:args.groups]:
        print(f"{count:>9}  {n:>12}  {share:>16.1f}  {sampled:>12.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()

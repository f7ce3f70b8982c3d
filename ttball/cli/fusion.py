"""``ttball fusion``: the seed article's four fusion experiments on this machine, side by side
with the seed's figures, and one sentence per experiment saying whether its conclusion holds."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ttball.cli import check_targets, prepare_out_dir
from ttball.errors import BackendUnavailable, UserError

if TYPE_CHECKING:
    from ttball.lab.fusion import FusionReport

SEED_NOTE = "* computed from the seed's times and sizes; the article does not print it."
SCALED_NOTE = "Sizes are scaled ×{scale:g}: the seed's figures are for full sizes, compare ratios."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads (default 1, as in the seed)")
    parser.add_argument("--repeats", type=int, default=7, help="samples per timing (median)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="factor on element counts for quick runs (default 1: seed sizes)")
    parser.add_argument("--out", metavar="DIR", help="write fusion.json and fusion.md here")
    parser.add_argument("--no-compile-cache", action="store_true",
                        help="skip timing the first compile in two fresh processes")


def run(args: argparse.Namespace) -> int:
    _validate(args)
    import torch

    from ttball.lab.fusion import FusionSizes, run_fusion

    if args.device == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailable("--device cuda: torch sees no CUDA GPU on this machine")
    out = prepare_out_dir(args.out) if args.out else None
    if out is not None:
        check_targets(out / "fusion.json", out / "fusion.md")
    sizes = FusionSizes() if args.scale == 1 else FusionSizes().scaled(args.scale)
    print("ttball fusion: running (about a minute at full size on a CPU)…", flush=True)
    report = run_fusion(sizes, device=args.device, threads=args.threads, repeats=args.repeats,
                        compile_cache=not args.no_compile_cache)
    command = command_line(args)
    print(render_text(report, command, args.scale))
    if out is not None:
        write_outputs(out, report, command, args.scale)
        print(f"wrote {out / 'fusion.json'} and {out / 'fusion.md'}")
    return 0


def _validate(args: argparse.Namespace) -> None:
    if args.threads < 1:
        raise UserError(f"--threads must be at least 1, got {args.threads}")
    if args.repeats < 1:
        raise UserError(f"--repeats must be at least 1, got {args.repeats}")
    if not args.scale > 0 or args.scale > 16:  # ×16: 1 GiB per chain array
        raise UserError(f"--scale must be in (0, 16], got {args.scale}")


def command_line(args: argparse.Namespace) -> str:
    parts = ["ttball", "fusion", "--device", args.device, "--threads", str(args.threads),
             "--repeats", str(args.repeats)]
    if args.scale != 1:
        parts += ["--scale", f"{args.scale:g}"]
    if args.no_compile_cache:
        parts.append("--no-compile-cache")
    if args.out:
        parts += ["--out", args.out]
    return " ".join(parts)


def write_outputs(out: Path, report: FusionReport, command: str, scale: float) -> None:
    from ttball.results import atomic_write, write_json

    write_json(out / "fusion.json", {"command": command, "scale": scale, **report.to_dict()})
    with atomic_write(out / "fusion.md") as f:
        f.write(render_markdown(report, command, scale))


# ---------------------------------------------------------------- rendering


def fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 0.01:
        return f"{value:.3g}"
    return f"{value:.2e}"


def _cells(row: dict[str, Any]) -> list[str]:
    seed = fmt(row["seed"]) + ("*" if row["seed_derived"] and row["seed"] is not None else "")
    ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}"
    label = f"{row['label']} ({row['unit']})" if row["unit"] else row["label"]
    return [row["experiment"], label, fmt(row["here"]), seed, ratio]


HEADER = ["experiment", "figure", "this machine", "seed", "here / seed"]


def _header_lines(report: FusionReport, command: str) -> list[str]:
    m, s = report.machine, report.sizes
    where = m.get("gpu") or m["cpu"]
    machine = (f"machine: {where} ({m['logical_cpus']} CPUs, {m['cpu_capability']}), device "
               f"{m['device']}, {m['threads']} thread(s), torch {m['torch']}, Python "
               f"{m['python']}, load {m.get('load_avg_1m')}, {m['date']}")
    sizes = (f"sizes: conv {s.conv_in}→{s.conv_out} {s.kernel}×{s.kernel} on 1×{s.conv_in}×"
             f"{s.height}×{s.width}; chain {s.chain_numel:,} float32; addition "
             f"{s.add_calls:,} × {s.add_slice:,}")
    env = " ".join(f"{k}={v}" for k, v in m.get("env", {}).items())
    return [machine, sizes, f"command: {env + ' ' if env else ''}{command}"]


def _notes(report: FusionReport, scale: float) -> list[str]:
    return [SEED_NOTE] + ([SCALED_NOTE.format(scale=scale)] if scale != 1 else [])


def render_text(report: FusionReport, command: str, scale: float = 1.0) -> str:
    table = [HEADER] + [_cells(r) for r in report.rows()]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines = _header_lines(report, command) + [""]
    for row in table:
        left = [c.ljust(w) for c, w in zip(row[:2], widths[:2])]
        right = [c.rjust(w) for c, w in zip(row[2:], widths[2:])]
        lines.append("  ".join(left + right))
    return "\n".join(lines + [""] + _notes(report, scale) + [""] + report.verdicts())


def render_markdown(report: FusionReport, command: str, scale: float = 1.0) -> str:
    lines = ["# ttball fusion", ""] + [f"- {h}" for h in _header_lines(report, command)]
    lines += ["", "| " + " | ".join(HEADER) + " |", "|---|---|---:|---:|---:|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |"
              for r in report.rows()]
    lines += [""] + _notes(report, scale) + ["", "## Does the seed's conclusion hold here?", ""]
    lines += [f"- {v}" for v in report.verdicts()]
    return "\n".join(lines) + "\n"

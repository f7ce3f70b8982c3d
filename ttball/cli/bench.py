"""``ttball bench``: measure the inference backends the same way and write the tables.

Examples::

    ttball bench --device cpu --quick --variants 'eager-fp32,folded-*' --out out/bench
    ttball bench --device cuda --batch 1,2,3 --out out/bench-h200
    ttball bench --list

With ``--out DIR`` the rows are saved as they are measured (after every batch size), marked
partial: ``meta.partial`` in ``bench.json``, a ``partial`` column in ``bench.csv``, a banner in
``bench.md``. They go to ``DIR/bench.{json,csv,md}`` when DIR holds no complete report, else to
``DIR/bench.partial.{json,csv,md}`` beside it: a run cut short (Ctrl-C, a time limit) never
replaces a complete report. A run that finishes writes ``bench.{json,csv,md,png}`` and removes
``bench.partial.*``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from typing import Any

from ttball.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--variants",
        default=None,
        help="comma-separated backend names or glob patterns (default: all; "
        "those that can't run here are reported as unavailable)",
    )
    parser.add_argument("--batch", default="1", help="comma-separated batch sizes (default 1)")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    parser.add_argument(
        "--weights",
        default=None,
        help="checkpoint (default: $TTBALL_WEIGHTS or the packaged weights; "
        "random weights with randomised BN statistics if there are none)",
    )
    parser.add_argument(
        "--size", default=None, help="input HxW (default: the weights' input size, 288x512)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI-sized: 2 warm-up calls, 3 groups of 2, 1 profiled call",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="untimed calls before timing (default 20; --quick 2)",
    )
    parser.add_argument(
        "--groups", type=int, default=None, help="timed groups (default 5; --quick 3)"
    )
    parser.add_argument(
        "--calls", type=int, default=None, help="calls per timed group (default 50; --quick 2)"
    )
    parser.add_argument(
        "--no-warm", action="store_true", help="skip the warm-restart first call of cached backends"
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start no variant after this many seconds; the rest are rows "
        "'skipped' (a variant already running finishes)",
    )
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="directory for bench.json, bench.csv, bench.md, bench.png. Rows are saved as they "
        "are measured, marked partial (meta.partial, a 'partial' CSV column, a banner in the "
        "Markdown): as bench.json/csv/md if DIR holds no complete report, else as "
        "bench.partial.json/csv/md beside it, so a run cut short never replaces a complete "
        "report; a run that finishes writes all four and removes bench.partial.*",
    )
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="compile, engine and tuning-record cache root, one folder a variant (default: a "
        "fresh temporary directory, so first calls are cold)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: torch's choice; 1 gives steadier "
        "numbers on a loaded machine)",
    )
    parser.add_argument("--tf32", action="store_true", help="allow TF32 on CUDA (default off)")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiler pass")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="add ball-level agreement with eager FP32 (decision flips, p99 px) on bundled clips",
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="list the registered variants and whether they can run here",
    )


def parse_batches(text: str) -> tuple[int, ...]:
    try:
        batches = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UserError(f"--batch wants comma-separated positive integers, got {text!r}") from None
    if not batches or min(batches) < 1:
        raise UserError(f"--batch wants comma-separated positive integers, got {text!r}")
    return tuple(dict.fromkeys(batches))


def parse_variants(text: str | None) -> list[str] | None:
    """The names and patterns of ``--variants``; None (all) when it was left out."""
    if text is None:
        return None
    patterns = [p.strip() for p in text.split(",") if p.strip()]
    if not patterns:  # "" or ",,": not the same as leaving the option out
        raise UserError("--variants needs at least one backend name or pattern "
                        "(leave it out for all)")
    return patterns


def parse_size(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not match:
        raise UserError(f"--size wants HxW such as 288x512, got {text!r}")
    h, w = int(match.group(1)), int(match.group(2))
    if h < 8 or w < 8 or h % 8 or w % 8:
        raise UserError(f"--size {h}x{w}: height and width must be multiples of 8 (at least 8)")
    return h, w


def _load(weights: str | None):  # type: ignore[no-untyped-def]
    from ttball.model import load_model, randomize_batchnorm

    model = load_model(weights)
    if model.config.name == "random-init":
        randomize_batchnorm(model)
        return model, "random-init (BN statistics randomised)"
    return model, f"{model.config.name} (sha256 {model.config.sha256[:12]})"


def _list(device: str) -> int:
    from rich.console import Console
    from rich.table import Table

    from ttball.backends import describe, resolve_device

    table = Table(title=f"backends on {resolve_device(device)}")
    for col in ("name", "available", "description / reason", "options (create's keywords)"):
        table.add_column(col)
    for row in describe(resolve_device(device)):
        table.add_row(
            row["name"], "yes" if row["available"] else "no", row["reason"] or row["description"],
            ", ".join(row["options"]) or "none",
        )
    console = Console()
    (console if console.is_terminal else Console(width=200)).print(table)
    return 0


def run(args: argparse.Namespace) -> int:
    import datetime
    import platform
    from pathlib import Path

    from tqdm import tqdm

    from ttball import __version__
    from ttball.backends import resolve_device
    from ttball.bench import FULL, QUICK, BenchConfig, BenchResult, run_bench, select_variants
    from ttball.bench.report import (
        PARTIAL_EXTENSIONS,
        PARTIAL_NAME,
        REPORT_EXTENSIONS,
        partial_name,
        print_table,
        write_partial,
        write_reports,
    )

    if args.list:
        return _list(args.device)
    device = resolve_device(args.device)
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads wants a positive integer, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)
    batches = parse_batches(args.batch)
    if args.time_budget is not None and not args.time_budget > 0:
        raise UserError(f"--time-budget wants a positive number of seconds, got {args.time_budget}")
    patterns = parse_variants(args.variants)
    if args.out:  # before the first variant runs: its rows are written as they come
        from ttball.cli import prepare_out_dir

        names = [f"bench.{ext}" for ext in REPORT_EXTENSIONS]
        names += [f"{PARTIAL_NAME}.{ext}" for ext in PARTIAL_EXTENSIONS]
        for name in names:
            if (Path(args.out) / name).is_dir():
                raise UserError(f"--out {args.out}: {name} there is a folder")
        prepare_out_dir(args.out)
    variants = select_variants(patterns, device)
    model, weights = _load(args.weights)
    height, width = parse_size(args.size) if args.size else model.config.input_size
    config = BenchConfig(
        variants=variants,
        device=device,
        batches=batches,
        height=height,
        width=width,
        plan=_plan(args, QUICK if args.quick else FULL),
        warm=not args.no_warm,
        time_budget_s=args.time_budget,
        profile_calls=0 if args.no_profile else (1 if args.quick else 3),
        cache_dir=Path(args.cache_dir).expanduser() if args.cache_dir else None,
        tf32=args.tf32,
        weights=weights,
        verify=args.verify,
    )
    about = {
        "command": "ttball bench " + shlex.join(sys.argv[2:] if _from_cli() else _argv(args)),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "ttball_version": __version__,
    }
    out = Path(args.out) if args.out else None
    partial_as = partial_name(out) if out is not None else ""  # never over a complete report

    def measured(result: BenchResult) -> bool:
        # (a run that measures nothing leaves an earlier report in --out as it was)
        return any(r["status"] == "ok" for r in result.rows)

    def save_partial(partial: BenchResult) -> None:
        if out is not None and measured(partial):
            partial.meta.update(about, partial=True)
            write_partial(out, partial, partial_as)

    result = run_bench(
        config,
        model,
        progress=lambda names: tqdm(
            names, total=len(variants), desc="bench", unit="variant", file=sys.stderr
        ),
        on_rows=save_partial,
    )
    result.meta.update(about, partial=False)
    print_table(result)
    if not measured(result):
        why = "; ".join(sorted({f"{r['variant']}: {r['status']}" for r in result.rows}))
        raise UserError(f"no variant measured anything ({why or 'none selected'}); "
                        "no report written")
    if out is not None:
        paths = write_reports(out, result)
        print(f"wrote {', '.join(str(p) for p in paths.values())}")
    failed = [r for r in result.rows if r["status"] == "failed"]
    return 1 if failed else 0


def _plan(args: argparse.Namespace, default: Any) -> Any:
    from dataclasses import replace

    changes = {
        k: getattr(args, k) for k in ("warmup", "groups", "calls") if getattr(args, k) is not None
    }
    for key, value in changes.items():
        if value < (0 if key == "warmup" else 1):
            raise UserError(
                f"--{key} wants a {'non-negative' if key == 'warmup' else 'positive'} "
                f"integer, got {value}"
            )
    return replace(default, **changes)


def _from_cli() -> bool:
    return len(sys.argv) > 1 and sys.argv[1] == "bench"


def _argv(args: argparse.Namespace) -> list[str]:
    """The options as given, for the report header when not called from the command line."""
    out = []
    for key, value in sorted(vars(args).items()):
        if key.startswith("_") or key == "command" or value in (None, False, ""):
            continue
        flag = "--" + key.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    return out

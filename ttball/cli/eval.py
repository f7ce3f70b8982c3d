"""``ttball eval PRED GT``: the published per-frame metrics of a track against ground truth."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ttball.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pred", type=Path, help="predicted track CSV, or a folder of them")
    p.add_argument(
        "gt",
        type=Path,
        help="ground-truth CSV, or a folder of them (GT/clip.csv pairs with PRED/clip/track.csv "
        "or PRED/clip.csv)",
    )
    p.add_argument(
        "--radius", type=float, default=4.0, help="match radius in original-frame px (default 4)"
    )
    p.add_argument(
        "--min-blur",
        type=float,
        default=8.0,
        help="GT blur length (px) from which a frame counts in the blur angle and length errors "
        "(default 8)",
    )
    p.add_argument(
        "--json", type=Path, metavar="FILE", help="also write the report as JSON to FILE"
    )
    p.add_argument(
        "--format", choices=("table", "json"), default="table", help="what to print (default table)"
    )


def run(args: argparse.Namespace) -> int:
    if not args.radius > 0:
        raise UserError(f"--radius must be positive, got {args.radius}")
    if not args.min_blur >= 0:
        raise UserError(f"--min-blur must be 0 or more, got {args.min_blur}")

    from ttball.evaluate import EvalConfig, evaluate_paths, format_table
    from ttball.results import write_json

    if args.json is not None:  # `--json gt.csv` replaced the ground truth with the report
        target = args.json.expanduser().resolve()
        for given in (args.pred, args.gt):
            inputs = [given] if not given.is_dir() else list(given.rglob("*"))
            if any(p.expanduser().resolve() == target for p in inputs):
                raise UserError(f"--json {args.json} is one of the inputs; write the report "
                                "elsewhere")
        if args.json.is_dir():
            raise UserError(f"--json {args.json} is a folder")

    report = evaluate_paths(
        args.pred, args.gt, EvalConfig(radius=args.radius, min_blur=args.min_blur)
    )
    if args.json is not None:
        write_json(args.json, report)
    print(json.dumps(report, indent=2) if args.format == "json" else format_table(report))
    return 0

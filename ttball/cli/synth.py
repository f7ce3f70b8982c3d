"""``ttball synth OUT``: write synthetic rally clips (MP4 + ground-truth CSV) and a manifest.

The clips are rendered into a hidden folder inside OUT and moved in, with the manifest written
last, only when all are done: a run cut short leaves OUT as it was (an earlier data set there
included), and a folder without ``manifest.json`` is not a complete data set.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ttball.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "out",
        type=Path,
        help="output folder (created if absent); a data set already there is replaced only "
        "once the new one is complete, and a run cut short leaves it as it was",
    )
    p.add_argument("--clips", type=int, default=10, help="number of clips (default 10)")
    p.add_argument(
        "--seed", type=int, default=0, help="data-set seed; clip k is reproducible alone"
    )
    p.add_argument(
        "--size",
        default="1280x720",
        help="frame size WxH (default 1280x720), or 'random': one of 1280x720, 1920x1080, "
        "960x540, 640x360 per clip",
    )
    p.add_argument("--fps", type=float, help="frame rate (default: random per clip, 25 to 120)")
    p.add_argument("--frames", type=int, default=150, help="frames per clip (default 150)")
    p.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="parallel processes (default: all cores)",
    )
    p.add_argument(
        "--plain", action="store_true", help="flat background, no players/noise (for debugging)"
    )


def parse_size(text: str) -> tuple[int, int] | None:
    if text.lower() == "random":
        return None
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise UserError(f"--size must be WxH (e.g. 1280x720) or 'random', got {text!r}") from None
    if w < 64 or h < 64 or w % 2 or h % 2:
        raise UserError(f"--size {text}: width and height must be even and at least 64")
    return w, h


def run(args: argparse.Namespace) -> int:
    if args.clips < 1:
        raise UserError(f"--clips must be at least 1, got {args.clips}")
    if args.frames < 3:
        raise UserError(f"--frames must be at least 3 (the detector's window), got {args.frames}")
    if args.fps is not None and not 1.0 <= args.fps <= 1000.0:
        raise UserError(f"--fps must be between 1 and 1000, got {args.fps}")
    if args.workers < 1:
        raise UserError(f"--workers must be at least 1, got {args.workers}")
    if args.seed < 0:
        raise UserError(f"--seed must be 0 or more, got {args.seed}")
    size = parse_size(args.size)

    from ttball.synth import ClipConfig, write_dataset

    config = ClipConfig(size=size, fps=args.fps, frames=args.frames, plain=args.plain)
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder")
    start = time.perf_counter()
    count = 0

    def progress(clip: dict) -> None:
        nonlocal count
        count += 1
        print(
            f"[{count}/{args.clips}] {clip['name']}: {clip['width']}x{clip['height']} "
            f"{clip['fps']:g} fps, ball visible in {clip['visible_frames']}/{clip['frames']}",
            file=sys.stderr,
        )

    try:
        manifest = write_dataset(
            out, args.clips, args.seed, config, min(args.workers, args.clips), progress
        )
    except OSError as exc:
        raise UserError(f"cannot write to {out}: {exc.strerror or exc}") from None
    elapsed = time.perf_counter() - start
    frames = sum(c["frames"] for c in manifest["clip_settings"])
    print(
        f"wrote {args.clips} clips ({frames} frames) to {out} in {elapsed:.1f} s "
        f"({frames / elapsed:.0f} frames/s)"
    )
    return 0

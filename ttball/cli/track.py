"""``ttball track VIDEO``: the ball in every frame → track.csv, track.json, optional overlay."""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ttball.cli import check_targets, check_threshold_flag, prepare_out_dir
from ttball.errors import UserError

if TYPE_CHECKING:
    from ttball.frames import FrameSource


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("video", help="a video file OpenCV can read, or a folder of images")
    p.add_argument("--weights", help="checkpoint (.safetensors, .pt/.pth/.tar); default: shipped weights")
    p.add_argument("--backend", default="auto",
                   help="backend name (ttball bench --list shows them); auto: the fastest that "
                        "passed verification on this machine, chosen once and cached")
    p.add_argument("--reselect", action="store_true", help="with --backend auto: choose again")
    p.add_argument("--auto-clips", nargs="+", metavar="CLIP", default=None,
                   help="with --backend auto: verify the candidates on these videos or image "
                        "folders (your own footage; their first 48 frames) instead of two "
                        "bundled synthetic clips; the choice is cached for them")
    p.add_argument("--compile-cache", default=None, metavar="DIR",
                   help="keep compiled kernels, tuning records and --backend auto's trials' "
                        "caches in DIR (as serve --compile-cache; ttball cache --dir DIR lists "
                        "it); default: $TTBALL_CACHE_DIR and torch's own caches")
    p.add_argument("--step", type=int, choices=(1, 3), default=3,
                   help="3: non-overlapping windows (fast); 1: sliding window")
    p.add_argument("--threshold", type=float, help="score threshold (default: the weights' own, 0.5)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--batch", type=int, default=1, help="windows per network call (default 1)")
    p.add_argument("--out", default=None, help="output folder (default: out/<video name>)")
    p.add_argument("--overlay", action="store_true", help="also write overlay.mp4 with the ball drawn")
    p.add_argument("--csv-format", choices=("ttball", "blurball"), default="ttball",
                   help="blurball: the published tool's columns Frame,X,Y,Visibility,L,Theta")
    p.add_argument("--dedup-ssim", type=float, default=None,
                   help="also drop near-duplicate frames with SSIM at or above this (e.g. 0.99)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.add_argument("--ray", action="store_true",
                   help="VIDEO is a folder of videos: track each with a Ray task (docs/ray.md)")
    p.add_argument("--address", default=None,
                   help="with --ray: the Ray cluster to join (e.g. auto); default: a private local cluster")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ttball.frames import FrameSource
    from ttball.model import load_model
    from ttball.pipeline import track
    from ttball.results import write_blurball_csv, write_json, write_track_csv

    if args.batch < 1:
        raise UserError(f"--batch must be at least 1, got {args.batch}")
    check_threshold_flag(args.threshold)
    if args.dedup_ssim is not None and not 0 < args.dedup_ssim <= 1:
        raise UserError(f"--dedup-ssim must be in (0, 1], got {args.dedup_ssim}")
    if args.address is not None and not args.ray:
        raise UserError("--address needs --ray: without it track runs in this process")
    if args.backend != "auto":
        from ttball.backends.base import spec

        spec(args.backend)  # an unknown name fails before anything is loaded or created
        if args.auto_clips:
            raise UserError("--auto-clips only applies with --backend auto")
        if args.reselect:
            raise UserError("--reselect only applies with --backend auto")
    for clip in args.auto_clips or ():
        if not Path(clip).exists():
            raise UserError(f"--auto-clips {clip}: no such file or folder")
        check_auto_clip(clip)
    if args.ray:  # (after the checks above: each video's task would fail on them, one by one)
        from ttball.distributed import run_archive

        return run_archive(args)
    source = FrameSource(args.video)  # fails fast on a missing or unreadable input
    info = source.info
    check_enough_frames(source, args.video)
    out = prepare_out_dir(Path(args.out) if args.out else Path("out") / Path(args.video).stem)
    targets = [out / "track.csv", out / "track.json"] + ([out / "overlay.mp4"] if args.overlay
                                                         else [])
    check_targets(*targets)  # before tracking: a run writes all of its files or none
    model = load_model(args.weights)
    if model.config.name == "random-init":
        print("warning: no trained weights found; running freshly initialised weights, "
              "so the detections are meaningless", file=sys.stderr)
    cache = None
    if args.compile_cache:  # before choosing too: the trials then fill the same caches
        from ttball.cachedir import use_compile_cache

        cache = use_compile_cache(args.compile_cache)
    backend = args.backend
    if backend == "auto":
        from ttball.backends.auto import choose_backend

        log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr))
        backend = choose_backend(model, args.device, reselect=args.reselect, log=log,
                                 clips=args.auto_clips,
                                 cache_dir=cache).backend
    bar = tqdm(total=info.frame_count or None, unit="frame", disable=args.quiet,
               desc="tracking", dynamic_ncols=True)
    try:
        result = track(args.video, model=model, backend=backend, device=args.device,
                       step=args.step, threshold=args.threshold, batch=args.batch,
                       dedup_ssim=args.dedup_ssim, on_frames=bar.update, cache_dir=cache)
    finally:
        bar.close()
    if result.source.ended_at is not None:
        print(f"warning: {args.video} declares {result.source.frame_count} frames but ended "
              f"after {result.source.ended_at} (a truncated file?); tracked what was there",
              file=sys.stderr)
    payload = result.to_json()
    payload["settings"]["csv_format"] = args.csv_format
    if args.overlay:  # first: the slowest to write and the likeliest to fail
        from ttball.overlay import write_overlay

        payload["overlay"] = str(write_overlay(args.video, result.rows, out / "overlay.mp4"))
    writer = write_blurball_csv if args.csv_format == "blurball" else write_track_csv
    writer(out / "track.csv", result.rows)
    write_json(out / "track.json", payload)
    if not args.quiet:
        _print_summary(result, out, args.overlay)
    return 0


def _print_summary(result, out: Path, overlay: bool) -> None:  # type: ignore[no-untyped-def]
    s = result.summary()
    t = result.timing
    lines = [
        (f"frames        {s['frames']} ({s['corrupt_frames']} corrupt skipped, "
         + (f"{s['other_size_frames']} of another size skipped, " if s["other_size_frames"]
            else "")
         + f"{t['duplicates']} duplicates)"),
        f"ball visible  {s['visible_pct']} %",
        (f"speed         {s['frames_per_s']} frames/s ({t['windows']} windows; network "
         f"{t['network_s']:.2f} s, decode {t['decode_s']:.2f} s, post {t['post_s']:.2f} s)"),
        f"device        {s['device']} ({s['backend']}, weights {result.weights.name})",
        f"written       {out / 'track.csv'}, {out / 'track.json'}"
        + (f", {out / 'overlay.mp4'}" if overlay else ""),
    ]
    print("\n".join(lines))


def check_enough_frames(source: FrameSource, video: str) -> None:
    """Fewer readable frames than a window needs fail as tracking would, but before --backend
    auto's trials (minutes): only the first frames are read, not the whole video."""
    from ttball.errors import VideoError
    from ttball.pipeline import MIN_FRAMES

    read = len(list(itertools.islice(source, MIN_FRAMES)))
    if read < MIN_FRAMES:
        raise VideoError(f"{video}: {read} readable frame(s); at least {MIN_FRAMES} are needed")


def check_auto_clip(clip: str) -> None:
    """An ``--auto-clips`` clip that does not decode failed every candidate's trial but the
    reference's, which then "won" silently: one line instead, before anything is tried."""
    from ttball.frames import FrameSource

    try:
        FrameSource(clip).info  # noqa: B018  (opening it is the check)
    except UserError as exc:
        raise UserError(f"--auto-clips {exc}") from None

"""``ttball train``: train or fine-tune BlurBall on synthetic rallies and/or labelled clips."""

from __future__ import annotations

import argparse
import json
import math

from ttball.errors import UserError


def _size(text: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HxW, got {text!r}") from None
    if h % 8 or w % 8 or h < 16 or w < 16:
        raise argparse.ArgumentTypeError(f"{text}: both sides must be multiples of 8, at least 16")
    return h, w


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/train", help="run folder: weights.safetensors, last.pt")
    p.add_argument("--steps", type=int, default=4000, help="optimizer steps (default 4000)")
    p.add_argument("--batch", type=int, default=16, help="windows a step (default 16)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (default 2e-3)")
    p.add_argument("--crop", type=_size, default=(144, 256), help="training crop HxW")
    p.add_argument("--full-frame-every", type=int, default=4,
                   help="every Nth step trains on whole 288x512 frames (0: never)")
    p.add_argument("--windows-per-clip", type=int, default=48,
                   help="training windows drawn from each clip a worker renders (default 48)")
    p.add_argument("--clips", nargs="*", default=[], help="folders of labelled clips (VIDEO + CSV)")
    p.add_argument("--no-synth", action="store_true", help="train on --clips only")
    p.add_argument("--synth-seed", type=int, default=1, help="seed of the synthetic clip stream")
    p.add_argument("--synth-frames", type=int, default=120,
                   help="frames of each synthetic clip (default 120)")
    p.add_argument("--workers", type=int, default=4, help="data-loader processes")
    p.add_argument("--seed", type=int, default=0, help="the run's random seed (default 0)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--no-amp", action="store_true", help="no bf16 autocast on the GPU")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the network for training (worth it when --profile says "
                        "the host, not the data, limits the steps; costs a compile per crop size)")
    p.add_argument("--max-minutes", type=float, default=0.0, help="stop after this long (0: no limit)")
    p.add_argument("--checkpoint-every", type=int, default=500,
                   help="write last.pt (to resume from) every this many steps (default 500)")
    p.add_argument("--init", help="fine-tune from these weights (a new run: an --out holding "
                   "last.pt resumes that run instead, without --init)")
    p.add_argument("--name", default="ttball-synth",
                   help="the weights' name, as reports and the worker show it (default "
                   "ttball-synth)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="print where step time goes (waiting for data, host, GPU) every N steps; "
                   "train.json has the whole run's breakdown either way")
    p.add_argument("--data-only", action="store_true",
                   help="measure the data pipeline alone: draw --steps batches without a model, "
                   "print windows/s and the CPU per window of the workers and the main process")


def run(args: argparse.Namespace) -> int:
    from ttball.results import write_json
    from ttball.train import TrainConfig, train
    from ttball.train_data import check_memory

    for name in ("steps", "batch", "windows_per_clip", "checkpoint_every"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if not args.no_synth and args.synth_frames < 3:
        raise UserError(f"--synth-frames must be at least 3 (a window), got {args.synth_frames}")
    if args.full_frame_every < 0:
        raise UserError(f"--full-frame-every must be 0 (never) or more, got {args.full_frame_every}")
    if args.workers < 0:
        raise UserError(f"--workers must be 0 (load in this process) or more, got {args.workers}")
    # float() takes "inf" and "nan": inf trained NaN weights and wrote them (and exited 0)
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise UserError(f"--lr must be a finite number above 0, got {args.lr}")
    if not (math.isfinite(args.max_minutes) and args.max_minutes >= 0):
        raise UserError(f"--max-minutes must be 0 (no limit) or more minutes, got {args.max_minutes}")
    if args.profile < 0:
        raise UserError("--profile must be 0 (off) or a number of steps")
    if not args.name.strip() or not args.name.isprintable():
        raise UserError(f"--name must be printable text, got {args.name!r}")
    # numpy's generators take no seed below 0 (a data worker's traceback); torch's none from 2**64
    for name, value in (("--seed", args.seed), ("--synth-seed", args.synth_seed)):
        if value < 0:
            raise UserError(f"{name} must be 0 or more, got {value}")
    if args.seed >= 2**64:
        raise UserError(f"--seed must be below 2**64, got {args.seed}")
    cfg = TrainConfig(
        out=args.out, steps=args.steps, batch=args.batch, lr=args.lr, crop=args.crop,
        full_frame_every=args.full_frame_every, windows_per_clip=args.windows_per_clip,
        clips=tuple(args.clips), synth=not args.no_synth, synth_seed=args.synth_seed,
        synth_frames=args.synth_frames, workers=args.workers, seed=args.seed,
        amp=not args.no_amp, max_minutes=args.max_minutes,
        checkpoint_every=args.checkpoint_every, init=args.init, compile=args.compile,
        name=args.name,
    )
    check_memory(cfg)  # before the output folder: an impossible batch leaves nothing behind
    if args.data_only:
        from ttball.train_profile import data_only

        # The first steps wait for every worker's first clip: leave them out.
        warmup = min(args.steps // 4, 2 * max(args.workers, 1))
        print(json.dumps({"workers": args.workers, **data_only(cfg, args.steps, warmup)}))
        return 0
    from ttball.cli import prepare_out_dir

    prepare_out_dir(args.out)
    summary = train(cfg, device=args.device, progress=not args.quiet, profile_every=args.profile)
    # a resumed run's --init is the one its first part was given (kept in last.pt)
    config = cfg.__dict__ | {"init": summary.pop("init")}
    write_json(f"{args.out}/train.json", {"config": config, **summary})
    if not args.quiet:
        print(json.dumps({k: v for k, v in summary.items() if k != "history"}, indent=1))
    return 0

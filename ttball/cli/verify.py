"""``ttball verify --backend NAME CLIPS...``: does an optimized backend find the same ball as the
reference? Exit 0 when every candidate passes, 1 when one fails, 2 on bad input (or when a
candidate of a list can't run here; the others are still verified and reported).

Examples::

    ttball verify --backend folded-fp16-cl --device cuda match.mp4 --out out/verify/folded
    ttball verify --backend eager-fp16,cudagraph-fp16 --device cuda clips/*.mp4 --images
    ttball verify --backend folded-fp32 --device cpu          # on the bundled synthetic clips
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ttball.cli import check_threshold_flag
from ttball.cli.export import CALIBRATION_METHODS
from ttball.errors import BackendUnavailable, UserError

IMAGES = 12  # worst frames drawn with --images: every one a flip or among the largest moves


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "clips",
        nargs="*",
        type=Path,
        help="videos or image folders (default: two bundled synthetic clips); "
        "ground truth is a CSV of the same name beside each, or in --gt",
    )
    p.add_argument(
        "--backend", required=True, help="candidate backend, or several separated by commas"
    )
    p.add_argument(
        "--reference", default="eager-fp32", help="reference backend (default eager-fp32)"
    )
    p.add_argument("--weights", help="checkpoint (default: the shipped weights)")
    p.add_argument(
        "--device", default="auto", choices=("auto", "cpu", "cuda"), help="device of the candidates"
    )
    p.add_argument(
        "--reference-device",
        choices=("auto", "cpu", "cuda"),
        help="device of the reference (default: --device)",
    )
    p.add_argument("--step", type=int, choices=(1, 3), default=3, help="window step (default 3)")
    p.add_argument(
        "--batch",
        type=int,
        default=1,
        help="windows per network call, the last padded (default 1, as a live session)",
    )
    p.add_argument("--threshold", type=float, help="score threshold (default: the weights' own)")
    p.add_argument(
        "--max-flips",
        type=int,
        default=0,
        help="visibility decisions allowed to differ (default 0)",
    )
    p.add_argument(
        "--p99-px",
        type=float,
        default=0.5,
        help="largest allowed 99th percentile of the position difference, "
        "original-frame px (default 0.5)",
    )
    p.add_argument(
        "--min-compared",
        type=int,
        default=1,
        help="heatmaps both must call visible for the check to mean anything (default 1)",
    )
    p.add_argument("--gt", type=Path, metavar="DIR", help="folder of ground-truth CSVs <clip>.csv")
    p.add_argument("--max-frames", type=int, help="use only the first N frames of each clip")
    p.add_argument(
        "--out",
        type=Path,
        help="report folder (default out/verify/<backend>; several candidates: "
        "one subfolder each and summary.md)",
    )
    p.add_argument(
        "--images",
        action="store_true",
        help=f"also write PNGs of the {IMAGES} worst frames (reference | candidate)",
    )
    p.add_argument(
        "--worst",
        type=int,
        default=20,
        help="largest position differences listed (every flip is listed; default 20)",
    )
    p.add_argument(
        "--tf32",
        action="store_true",
        help="let the candidates use TF32 on CUDA (the reference never does)",
    )
    p.add_argument(
        "--calibrate",
        type=Path,
        nargs="+",
        metavar="CLIP",
        help="INT8 candidates (onnxrt-int8, openvino-int8, ort-mobile-int8): calibrate on these "
        "videos or image folders, your cameras' footage, other than the clips verified "
        "(default: 16 synthetic rally windows); it takes every path after it, so name the "
        "clips to verify first",
    )
    p.add_argument(
        "--calibration-method",
        choices=CALIBRATION_METHODS,
        help="with --calibrate: how activation ranges are chosen (default minmax)",
    )
    p.add_argument("--quiet", action="store_true", help="print only the verdict")


def _candidates(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError("--backend needs at least one backend name")
    return list(dict.fromkeys(names))


def _check_numbers(args: argparse.Namespace) -> None:
    """The numeric options, named as typed: VerifyOptions and Tolerances check the same values
    but name their own fields (``max_frames``)."""
    if args.batch < 1:
        raise UserError(f"--batch must be at least 1, got {args.batch}")
    if args.max_frames is not None and args.max_frames < 3:
        raise UserError(f"--max-frames must be at least 3 (a window), got {args.max_frames}")
    check_threshold_flag(args.threshold)
    for flag, value in (("--worst", args.worst), ("--max-flips", args.max_flips),
                        ("--p99-px", args.p99_px), ("--min-compared", args.min_compared)):
        if not value >= 0:  # also refuses NaN
            raise UserError(f"{flag} must be 0 or more, got {value}")


def _int8_options(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """The INT8 candidates' calibration options from ``--calibrate``, checked."""
    from ttball.backends.base import spec

    if args.calibration_method and not args.calibrate:
        raise UserError("--calibration-method only applies with --calibrate")
    if not args.calibrate:
        return {}
    if not any("int8" in spec(n).tags for n in names):
        raise UserError("--calibrate applies to INT8 candidates only (onnxrt-int8, "
                        "openvino-int8, ort-mobile-int8); none is among --backend's")
    from ttball.frames import FrameSource

    for clip in args.calibrate:
        if not clip.exists():
            raise UserError(f"--calibrate: {clip} does not exist")
        try:  # one that cannot be read fails here, before the model loads
            _ = FrameSource(clip).info
        except UserError as exc:
            raise UserError(f"--calibrate: {exc}") from None
    if set(map(Path.resolve, args.calibrate)) & set(map(Path.resolve, args.clips)):
        print("warning: --calibrate names clips that are also verified; the check is fairer "
              "on footage the calibration did not see", file=sys.stderr)
    options = {"calibrate": [str(c) for c in args.calibrate]}
    return options | ({"method": args.calibration_method} if args.calibration_method else {})


def run(args: argparse.Namespace) -> int:
    import copy

    from ttball.backends import create, resolve_device
    from ttball.backends.base import spec
    from ttball.model import load_model
    from ttball.verify import (
        Tolerances,
        VerifyOptions,
        bundled_reference_clips,
        prepare_clips,
        verify_many,
        write_report,
        write_summary,
    )

    names = _candidates(args.backend)
    for name in [args.reference, *names]:
        spec(name)  # an unknown name fails before anything is loaded
    int8 = _int8_options(args, names)
    _check_numbers(args)
    tolerances = Tolerances(
        max_flips=args.max_flips, p99_px=args.p99_px, min_compared=args.min_compared
    )
    options = VerifyOptions(
        step=args.step,
        batch=args.batch,
        threshold=args.threshold,
        worst=args.worst,
        images=IMAGES if args.images else 0,
        tf32=args.tf32,
        max_frames=args.max_frames,
    )
    clips = list(args.clips)
    if not clips:
        clips = bundled_reference_clips()
        _say(
            args,
            f"no clips given: verifying on {len(clips)} bundled synthetic clips in "
            f"{clips[0].parent}"
            + (" (--calibrate takes every path after it: name the clips to verify first)"
               if args.calibrate else ""),
        )
    prepare_clips(clips, args.gt)  # bad clips fail before the model loads
    device = resolve_device(args.device)
    ref_device = resolve_device(args.reference_device or args.device)
    single = len(names) == 1
    out = args.out or Path("out") / "verify" / (names[0] if single else "")

    def folder(name: str) -> Path:
        return out if single else out / name

    from ttball.cli import check_targets, prepare_out_dir

    prepare_out_dir(out)  # before the backends are built and the clips run, not after
    for name in names:  # (a skipped candidate's folder is not made)
        if folder(name).exists() and not folder(name).is_dir():
            raise UserError(f"{folder(name)} is a file; cannot write {name}'s report there")
        check_targets(folder(name) / "verify.json", folder(name) / "verify.md")
    model = load_model(args.weights)
    if model.config.name == "random-init":
        print(
            "warning: no trained weights found; with random weights the detections are "
            "meaningless and so is this verification",
            file=sys.stderr,
        )
    reference = create(args.reference, copy.deepcopy(model), ref_device)
    candidates: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    for name in names:
        try:
            candidates[name] = create(name, model, device,
                                      **(int8 if "int8" in spec(name).tags else {}))
        except BackendUnavailable as exc:
            if len(names) == 1:
                raise
            unavailable[name] = str(exc)
            _say(args, f"skipped: {exc}")
    if not candidates:
        raise UserError("none of the candidates can run here: " + "; ".join(unavailable.values()))


    def on_clip(clip: str, reports: dict[str, Any]) -> None:
        """Progress, and the reports so far on disk (a run cut short by a timeout keeps them)."""
        for name, report in reports.items():
            write_report(report, folder(name), images=False)
            c = report.clips[-1] if report.clips and report.clips[-1]["name"] == clip else None
            if c is None:
                continue
            _say(
                args,
                f"{clip}: {name}: {c['windows']} windows, {c['detections']['flips']} flips, "
                f"p99 {_px(c['detections']['position_diff_px']['p99'])}, reference "
                f"{c['seconds']['reference']:.2f} s, candidate {c['seconds']['candidate']:.2f} s"
                + (f", ERROR {report.error}" if report.error else ""),
            )

    reports = verify_many(
        candidates,
        reference,
        clips,
        tolerances,
        config=model.config,
        options=options,
        gt_dir=args.gt,
        on_clip=on_clip,
    )
    for name, report in reports.items():
        written = write_report(report, folder(name))
        print(f"{'PASS' if report.passed else 'FAIL'}  {report.reason()}")
        _say(args, f"      report: {written[1]}")
    if not single:
        write_summary(reports, unavailable, out)
        print(f"summary: {out / 'summary.md'}")
    if unavailable:
        return 2
    return 0 if all(r.passed for r in reports.values()) else 1


def _px(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} px"


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, file=sys.stderr)

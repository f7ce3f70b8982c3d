"""``ttball export onnx|triton``: write the network as ONNX (FP32, FP16, INT8), as ONNX
Runtime's format for phones (``--out X.ort``), or as a Triton model repository. Every export is
checked: ``onnx.checker``, then one run in ONNX Runtime compared with eager FP32 (printed); an
``.ort`` file also against its ONNX file."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ttball.errors import UserError

# ttball.export.quantize.METHODS (a test keeps them equal), named here so that parsing the
# command line does not import onnx
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")

if TYPE_CHECKING:
    from ttball.model import BlurBall


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="target", metavar="TARGET", required=True)
    onnx = sub.add_parser("onnx", help="one ONNX file with its metadata (.onnx, or .ort for "
                          "phones)",
                          description="Export the network to one ONNX file with its metadata; "
                          "with --out X.ort, in ONNX Runtime's format for ONNX Runtime Mobile "
                          "(Android, iOS), with the operators it needs listed beside it.")
    onnx.add_argument("--out", type=Path, required=True,
                      help="the file to write: .onnx, or .ort (ONNX Runtime Mobile; also "
                      "writes X.required_operators.config for a minimal build)")
    onnx.add_argument("--platform", choices=("arm", "amd64"),
                      help="with --out X.ort: the phone's CPU (default arm: int8 x int8 "
                      "kernels for --int8, no x86-only layout)")
    _common(onnx)
    onnx.add_argument("--fold-bn", action="store_true",
                      help="fold BatchNorm in FP32 before export (the exporter folds it anyway; "
                      "matters with --fp16)")
    onnx.add_argument("--dynamic-batch", action="store_true",
                      help="leave the batch dimension free (default: batch 1)")
    onnx.add_argument("--opset", type=int, help="ONNX opset (default: the exporter's own, 18 "
                      "for dynamo, 17 for torchscript)")
    onnx.add_argument("--exporter", choices=("dynamo", "torchscript"), default="dynamo",
                      help="torch exporter (default dynamo: the cleaner graph)")
    onnx.add_argument("--int8", action="store_true",
                      help="static INT8 QDQ quantisation, calibrated on --calibrate clips")
    onnx.add_argument("--calibrate", type=Path, nargs="+", metavar="CLIP",
                      help="videos (or image folders) to calibrate INT8 on (default: 16 "
                      "synthetic rally windows; real footage from your cameras is better)")
    onnx.add_argument("--calibration-method", choices=CALIBRATION_METHODS,
                      help="how activation ranges are chosen (default minmax)")
    onnx.add_argument("--calibration-windows", type=int, default=None,
                      help="with --calibrate: 3-frame windows used, spread over the clips "
                           "(default 32)")
    onnx.set_defaults(_target=_run_onnx)

    triton = sub.add_parser("triton", help="a Triton Inference Server model repository",
                            description="Write REPO/blurball/{config.pbtxt,1/model.onnx}.")
    triton.add_argument("--out", type=Path, required=True, help="the repository folder")
    _common(triton)
    triton.add_argument("--onnx", type=Path, metavar="FILE",
                        help="package this exported file (e.g. an --int8 export with "
                        "--dynamic-batch) instead of exporting the weights")
    triton.add_argument("--max-batch-size", type=int, default=8,
                        help="Triton's max_batch_size (default 8, at least 3)")
    triton.set_defaults(_target=_run_triton)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--weights", type=Path, help="checkpoint (default: the shipped weights)")
    p.add_argument("--fp16", action="store_true", help="FP16 weights, input and output")
    p.add_argument("--size", help="input HxW (default: the weights' own, e.g. 288x512)")


MIN_OPSET = 9  # the oldest opset with every operator the network exports to (Upsample, BN)


def run(args: argparse.Namespace) -> int:
    return int(args._target(args) or 0)


def _size(args: argparse.Namespace, model: BlurBall) -> tuple[int, int]:
    config = model.config
    if not args.size:
        return config.input_height, config.input_width
    from ttball.export.onnx import check_size

    try:
        h, w = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        raise UserError(f"--size must be HxW (e.g. 288x512), got {args.size!r}") from None
    check_size(h, w)  # before --int8's calibration, which failed on it with a traceback
    return h, w


def _load(args: argparse.Namespace) -> BlurBall:
    from ttball.model import load_model

    model = load_model(args.weights)
    if model.config.name == "random-init":
        print("note: no trained weights found; exporting the random initialisation")
    return model


def _check_onnx_args(args: argparse.Namespace) -> None:
    if args.int8 and args.fp16:
        raise UserError("--int8 and --fp16 exclude each other (INT8 starts from the FP32 export)")
    if args.calibrate and not args.int8:
        raise UserError("--calibrate only applies with --int8")
    if args.calibration_method and not args.int8:
        raise UserError("--calibration-method only applies with --int8")
    if args.calibration_windows is not None and not args.calibrate:  # (it was ignored)
        raise UserError("--calibration-windows only applies with --calibrate (the synthetic "
                        "calibration uses one window from each of its clips)")
    if args.calibration_windows is not None and args.calibration_windows < 1:
        raise UserError("--calibration-windows must be at least 1")
    if args.opset is not None:
        import onnx

        newest = onnx.defs.onnx_opset_version()
        if not MIN_OPSET <= args.opset <= newest:
            raise UserError(f"--opset must be between {MIN_OPSET} and {newest} (this onnx "
                            f"package's newest), got {args.opset}")
    if args.out.suffix not in (".onnx", ".ort"):
        raise UserError(f"--out must name a .onnx or .ort file, got {args.out}")
    if args.platform and args.out.suffix != ".ort":
        raise UserError("--platform only applies with --out X.ort")
    if args.fp16 and args.out.suffix == ".ort":  # (the conversion bakes in this CPU's casts)
        raise UserError("--fp16 with --out X.ort: the conversion runs on this machine's CPU "
                        "provider, which has no FP16 convolutions and would fix FP32 casts into "
                        "the file; export FP32 (.ort), or --fp16 to .onnx for a phone's GPU")
    if not args.out.parent.is_dir():
        what = "is not a folder" if args.out.parent.exists() else "does not exist"
        raise UserError(f"--out: folder {args.out.parent} {what}")
    if args.out.is_dir():
        raise UserError(f"--out {args.out} is a folder")
    if not os.access(args.out.parent, os.W_OK):
        raise UserError(f"--out: folder {args.out.parent} is not writable")


def _run_onnx(args: argparse.Namespace) -> int:
    _check_onnx_args(args)
    model = _load(args)
    height, width = _size(args, model)
    options = {"fold_bn": args.fold_bn, "dynamic_batch": args.dynamic_batch,
               "opset": args.opset, "height": height, "width": width, "exporter": args.exporter}
    if args.out.suffix == ".onnx":
        return _write_onnx(args, model, options, args.out, f"wrote {args.out}")
    from ttball.export.ort import convert_to_ort

    with tempfile.TemporaryDirectory(dir=args.out.parent) as tmp:
        onnx_path = Path(tmp) / args.out.with_suffix(".onnx").name
        _write_onnx(args, model, options, onnx_path, shown="the ONNX export")
        result = convert_to_ort(onnx_path, args.out, platform=args.platform or "arm")
    print(f"wrote {result.path} (ONNX Runtime format, {result.platform}; vs the ONNX file: max "
          f"abs diff {result.max_abs_diff:.3g}) and {result.operators} "
          f"({result.operator_count} operators)")
    return 0


def _write_onnx(args: argparse.Namespace, model: BlurBall, options: dict[str, Any],
                out: Path, shown: str) -> int:
    """Export to ``out`` and print what was written, ``shown`` first (what became of ``out``:
    "wrote PATH", or a name for a temporary file)."""
    from ttball.export import export_onnx

    if not args.int8:
        result = export_onnx(model, out, fp16=args.fp16, **options)
        print(f"{shown} ({result.precision}, "
              f"{result.exporter} exporter, opset {result.opset}); ONNX Runtime vs eager FP32: "
              f"max abs diff {result.max_abs_diff:.3g}, relative {result.max_rel_diff:.3g}")
        return 0
    return _run_int8(args, model, options, out, shown)


def _run_int8(args: argparse.Namespace, model: BlurBall, options: dict[str, Any],
              out: Path, shown: str) -> int:
    from ttball.export import export_onnx
    from ttball.export.quantize import (
        DEFAULT_METHOD,
        calibration_windows,
        quantize_int8,
        synthetic_windows,
    )

    config, size = model.config, (options["height"], options["width"])
    if args.calibrate:
        windows = calibration_windows(args.calibrate, config, *size,
                                      limit=args.calibration_windows or 32)
    else:
        print("note: no --calibrate clips; calibrating on synthetic rally frames")
        windows = synthetic_windows(config, *size)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        fp32 = export_onnx(model, Path(tmp) / "fp32.onnx", **options)
        result = quantize_int8(fp32.path, out, windows,
                               method=args.calibration_method or DEFAULT_METHOD)
    print(f"{shown} (int8 QDQ, "
          f"{result.method} on {result.windows} windows); "
          f"vs FP32 on those windows: max abs diff {result.max_abs_diff:.3g}, mean "
          f"{result.mean_abs_diff:.3g}, same argmax in {result.argmax_same:.0%} of heatmaps")
    return 0


def _run_triton(args: argparse.Namespace) -> int:
    from ttball.export.triton import write_triton_repo

    if args.out.exists() and not args.out.is_dir():
        raise UserError(f"--out {args.out} exists and is not a folder")
    if args.onnx and (args.weights or args.fp16 or args.size):
        raise UserError("--onnx packages a file as it is: --weights, --fp16 and --size don't apply")
    if args.onnx:
        repo = write_triton_repo(None, args.out, source=args.onnx,
                                 max_batch_size=args.max_batch_size)
    else:
        model = _load(args)
        height, width = _size(args, model)
        repo = write_triton_repo(model, args.out, fp16=args.fp16, height=height, width=width,
                                 max_batch_size=args.max_batch_size)
    print(f"wrote {repo.config} and {repo.model}")
    if repo.export is not None:
        print(f"ONNX Runtime vs eager FP32: max abs diff {repo.export.max_abs_diff:.3g}, "
              f"relative {repo.export.max_rel_diff:.3g}")
    return 0

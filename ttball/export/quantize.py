"""INT8 static quantisation of an exported FP32 model, calibrated on real frames.

QDQ format (QuantizeLinear/DequantizeLinear pairs around FP32 ops, which ONNX Runtime fuses into
integer kernels and which TensorRT and OpenVINO read as explicit quantisation), per-channel
symmetric int8 weights, asymmetric uint8 activations: ORT's recommendation for x86 with VNNI.

Calibration windows are preprocessed exactly as for inference (:mod:`ttball.frames`): each
frame resized straight to W×H (bilinear), RGB, /255, normalised with the weights' mean/std,
three consecutive frames stacked oldest first into ``(1, 9, H, W)`` float32.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ttball.errors import UserError, VideoError
from ttball.export.onnx import INPUT_NAME, OUTPUT_NAME, check_size, save_model
from ttball.model.config import WeightsConfig

METHODS = ("minmax", "entropy", "percentile")
DEFAULT_METHOD = "minmax"
"""Picked by detections on held-out windows of a real rally clip with the trained
``ttball-synth`` weights (docs/benchmarks/cpu-onnx.md): visible peaks kept within 4 px of eager
FP32 were 43/48 for MinMax, 42/48 for Entropy and 35/48 for Percentile, which clips exactly the
rare large activations a small ball produces (it had the lowest mean error all the same)."""
PERCENTILE = 99.999


def clip_windows(
    path: str | os.PathLike[str], config: WeightsConfig, height: int, width: int, step: int = 3,
) -> Iterator[np.ndarray]:
    """Windows ``(1, 9, height, width)`` of consecutive frames of a video (or image folder),
    one every ``step`` frames, preprocessed by :func:`ttball.frames.preprocess`."""
    from ttball.frames import FrameSource, preprocess

    check_size(height, width)
    sized = config.evolve(input_height=height, input_width=width)
    recent: list[np.ndarray] = []
    for count, frame in enumerate(FrameSource(path), start=1):
        recent = (recent + [frame.rgb])[-config.frames_in:]
        if len(recent) == config.frames_in and (count - config.frames_in) % step == 0:
            yield preprocess(recent, sized).numpy()


def calibration_windows(
    clips: Sequence[str | os.PathLike[str]], config: WeightsConfig, height: int, width: int,
    limit: int = 32,
) -> list[np.ndarray]:
    """Up to ``limit`` non-overlapping windows, spread evenly over all windows of ``clips``
    (a list of videos or image folders; one path alone is taken as a list of one)."""
    if isinstance(clips, (str, os.PathLike)):
        clips = [clips]
    elif isinstance(clips, bytes) or not isinstance(clips, Iterable):
        raise TypeError(f"clips must be a list of paths (videos or image folders), "
                        f"got {type(clips).__name__}")
    clips = list(clips)
    if not clips:
        raise UserError("INT8 calibration needs at least one clip")
    odd = [c for c in clips if not isinstance(c, (str, os.PathLike))]
    if odd:
        raise TypeError(f"clips must be a list of paths (videos or image folders), "
                        f"got {type(odd[0]).__name__} {odd[0]!r:.60}")
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
        raise UserError(f"calibration limit must be a whole number of windows >= 1, got {limit!r}")
    check_size(height, width)
    windows = [w for clip in clips for w in clip_windows(clip, config, height, width)]
    if not windows:
        raise VideoError(f"no {config.frames_in}-frame window in {', '.join(map(str, clips))}")
    pick = np.linspace(0, len(windows) - 1, min(limit, len(windows))).round().astype(int)
    return [windows[i] for i in sorted(set(pick.tolist()))]


SYNTHETIC_CLIPS = 16
"""Default calibration set: one window from each of 16 synthetic rally clips (seeds 0–15),
about 4 s to render; used only when no real footage is given."""


def synthetic_windows(
    config: WeightsConfig, height: int, width: int, clips: int = SYNTHETIC_CLIPS,
) -> list[np.ndarray]:
    """One ``(1, 9, height, width)`` window from each of ``clips`` :mod:`ttball.synth` clips
    (random scene, size and frame rate per seed), for calibrating without real footage."""
    import cv2

    from ttball.frames import preprocess
    from ttball.synth import ClipConfig, generate_clip

    sized = config.evolve(input_height=height, input_width=width)
    windows = []
    for seed in range(clips):
        frames, _ = generate_clip(seed, ClipConfig(size=None, frames=config.frames_in))
        rgb = [cv2.cvtColor(f, cv2.COLOR_BGR2RGB) for f in frames]
        windows.append(preprocess(rgb, sized).numpy())
    return windows


class _Windows:
    """ORT's CalibrationDataReader over a list of windows, in ranges (to bound memory)."""

    def __init__(self, windows: Sequence[np.ndarray]) -> None:
        self.windows = windows
        self.start, self.end = 0, len(windows)

    def __len__(self) -> int:
        return len(self.windows)

    def set_range(self, start_index: int, end_index: int) -> None:
        self.start, self.end = start_index, min(end_index, len(self.windows))

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.start >= self.end:
            return None
        self.start += 1
        return {INPUT_NAME: np.ascontiguousarray(self.windows[self.start - 1], np.float32)}

    def rewind(self) -> None:
        self.start = 0


@dataclass(frozen=True)
class QuantizeResult:
    """The INT8 file and its error against the FP32 file on the calibration windows."""

    path: Path
    method: str
    windows: int
    max_abs_diff: float
    mean_abs_diff: float
    argmax_same: float
    """Fraction of heatmaps (3 per window) whose argmax pixel is the FP32 one."""

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "path": str(self.path)}


def _calibration_method(name: str) -> Any:
    from onnxruntime.quantization import CalibrationMethod

    table = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
             "percentile": CalibrationMethod.Percentile}
    if name not in table:
        raise UserError(f"unknown calibration method {name!r}; use one of {', '.join(METHODS)}")
    return table[name]


def quantize_int8(
    fp32_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    windows: Iterable[np.ndarray],
    *,
    method: str = DEFAULT_METHOD,
    per_channel: bool = True,
    op_types: Sequence[str] | None = None,
) -> QuantizeResult:
    """Quantise the FP32 ONNX file at ``fp32_path`` to INT8 QDQ at ``out_path``.

    ``windows`` are preprocessed ``(1, 9, H, W)`` float32 arrays at the file's input size.
    ``op_types`` limits which op types get quantised (default: every one ORT can); each must be
    in the graph. ``out_path`` can't be the FP32 file: it is read again to measure the error.
    Bad input raises :class:`UserError` before anything is written. The head
    (the conv that writes ``heatmaps``) stays FP32: the logits' peak is the one value that
    matters and the rarest, so an 8-bit output grid or a clipped range would cost most there.
    """
    import onnx

    calibrate_method = _calibration_method(method)
    source = _read_fp32(fp32_path)
    windows = _check_windows(windows, source.input_shape, fp32_path)
    ops = _check_op_types(op_types, source.op_types, fp32_path)
    out = _check_out(fp32_path, out_path)
    tmp, prepared = (out.with_name(f".{out.name}.{part}.tmp") for part in ("qdq", "pre"))
    try:
        _quantize(fp32_path, prepared, tmp, windows, calibrate_method, per_channel, ops)
        proto = onnx.load(str(tmp))
    finally:
        tmp.unlink(missing_ok=True)
        prepared.unlink(missing_ok=True)
    if not any(n.op_type == "QuantizeLinear" for n in proto.graph.node):  # not int8 at all
        asked = f" of types {', '.join(ops)}" if ops else ""
        raise UserError(f"no op{asked} of {fp32_path} was quantised; its graph has "
                        f"{', '.join(source.op_types)}")
    meta = source.metadata | {
        "precision": "int8", "quantization": f"QDQ static, u8 activations, s8 weights "
        f"{'per-channel' if per_channel else 'per-tensor'}, {method} on {len(windows)} windows",
    }
    onnx.helper.set_model_props(proto, meta)
    save_model(proto, out_path)
    return _compare(fp32_path, out_path, windows, method)


@dataclass(frozen=True)
class _Source:
    """What quantising needs to know of the FP32 file before it starts."""

    input_shape: tuple[int | None, ...]
    """The ``frames`` input's dimensions; None where the file leaves one free (a batch axis)."""
    op_types: list[str]
    metadata: dict[str, str]


def _read_fp32(path: str | os.PathLike[str]) -> _Source:
    """The FP32 file's input shape, op types and metadata; one line if it can't be read."""
    import onnx
    from google.protobuf.message import DecodeError

    if Path(path).is_dir():
        raise UserError(f"FP32 model {path} is a folder, not an ONNX file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except FileNotFoundError:
        raise UserError(f"FP32 model {path} does not exist") from None
    except OSError as exc:
        raise UserError(f"cannot read FP32 model {path}: {exc.strerror or exc}") from None
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise UserError(f"FP32 model {path} is not an ONNX file ({exc})") from None
    inputs = {i.name: i for i in proto.graph.input}
    if INPUT_NAME not in inputs or OUTPUT_NAME not in {o.name for o in proto.graph.output}:
        raise UserError(f"FP32 model {path} is not a ttball ONNX export: it has no "
                        f"{INPUT_NAME!r} input and {OUTPUT_NAME!r} output")
    dims = inputs[INPUT_NAME].type.tensor_type.shape.dim
    op_types = sorted({n.op_type for n in proto.graph.node})
    metadata = {p.key: p.value for p in proto.metadata_props}
    precision = metadata.get("precision", "fp32")
    if "QuantizeLinear" in op_types:
        precision = "int8"
    if precision != "fp32":  # an INT8 file was quantised again; an FP16 one failed inside ORT
        raise UserError(f"{path} is not an FP32 export (precision {precision}); quantise an "
                        "FP32 one (ttball export without --fp16 or --int8)")
    return _Source(
        tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims),
        op_types, metadata,
    )


def _check_windows(
    windows: Iterable[np.ndarray], shape: tuple[int | None, ...], path: str | os.PathLike[str],
) -> list[np.ndarray]:
    """``windows`` as float32 arrays, each of the file's input shape with finite values; one
    line naming the first that is not."""
    want = "(" + ", ".join(str(d) if d else "N" for d in shape) + ")"
    if isinstance(windows, (np.ndarray, str, bytes)) or not isinstance(windows, Iterable):
        raise UserError(f"windows must be a list of {want} float32 arrays, "
                        f"got one {type(windows).__name__}")
    checked = []
    for i, window in enumerate(windows):
        try:
            array = np.asarray(window)
        except (ValueError, TypeError) as exc:
            raise UserError(f"window {i} is not an array: {exc}") from None
        if array.dtype.kind != "f":
            raise UserError(f"window {i} is {array.dtype}: windows are preprocessed float32 "
                            f"(ttball.frames.preprocess), not raw pixels")
        if array.ndim != len(shape) or any(
                d != s if s else d < 1 for d, s in zip(array.shape, shape, strict=True)):
            raise UserError(f"window {i} has shape {tuple(array.shape)}; {path} takes {want}")
        if not np.isfinite(array).all():
            raise UserError(f"window {i} holds NaN or infinite values")
        checked.append(np.asarray(array, np.float32))
    if not checked:
        raise UserError("INT8 calibration needs at least one window")
    return checked


def _check_op_types(
    op_types: Sequence[str] | None, present: list[str], path: str | os.PathLike[str],
) -> list[str] | None:
    """``op_types`` as a list (a single name is a list of one); one line if one is not in the
    graph or none can be quantised."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    if not op_types:
        return None
    names = [op_types] if isinstance(op_types, str) else list(op_types)
    quantisable = [op for op in present if op in QDQRegistry or op in QLinearOpsRegistry]
    missing = [op for op in names if op not in present]
    if missing:
        raise UserError(f"op_types: {path} has no {', '.join(map(str, missing))} op; its graph "
                        f"has {', '.join(present)} (quantisable: {', '.join(quantisable)})")
    if not set(names) & set(quantisable):
        raise UserError(f"op_types: {', '.join(names)} can't be quantised; of the ops of {path}, "
                        f"these can: {', '.join(quantisable)}")
    return names


def _check_out(fp32_path: str | os.PathLike[str], out_path: str | os.PathLike[str]) -> Path:
    """``out_path`` as a Path, if the INT8 file can be written there without harm."""
    out = Path(out_path)
    if out.is_dir():
        raise UserError(f"{out_path} is a folder; cannot write the INT8 file in its place")
    if not out.parent.is_dir():
        raise UserError(f"cannot write {out_path}: folder {out.parent} does not exist")
    if out.exists() and os.path.samefile(fp32_path, out):
        raise UserError(f"{out_path} is the FP32 model {fp32_path} itself; write the INT8 "
                        f"file to another path (quantising reads the FP32 file to check the result)")
    return out


def _quantize(
    fp32_path: str | os.PathLike[str], prepared: Path, out: Path, windows: list[np.ndarray],
    calibrate_method: Any, per_channel: bool, op_types: Sequence[str] | None,
) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quant_pre_process, quantize_static

    # Shape inference and ORT's basic graph clean-up, as ORT asks for before quantising.
    quant_pre_process(str(fp32_path), str(prepared), skip_symbolic_shape=True)
    with contextlib.redirect_stdout(io.StringIO()):  # ORT prints calibration progress
        quantize_static(
            str(prepared), str(out), _Windows(windows),
            quant_format=QuantFormat.QDQ, per_channel=per_channel, reduce_range=False,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
            op_types_to_quantize=list(op_types) if op_types else None,
            nodes_to_exclude=_head_nodes(prepared),
            calibrate_method=calibrate_method,
            # one window per calibration pass: histograms of every activation of a full-size
            # window take about 1 GB, so passing all windows at once would not fit
            extra_options={"CalibStridedMinMax": 1, "CalibPercentile": PERCENTILE},
        )


def _head_nodes(path: str | os.PathLike[str]) -> list[str]:
    import onnx

    graph = onnx.load(str(path)).graph
    return [n.name for n in graph.node if OUTPUT_NAME in n.output]


def _compare(
    fp32_path: str | os.PathLike[str], int8_path: str | os.PathLike[str],
    windows: Sequence[np.ndarray], method: str,
) -> QuantizeResult:
    from ttball.export.onnx import ort_run, ort_session

    fp32, int8 = ort_session(fp32_path), ort_session(int8_path)
    diffs, same = [], []
    for w in windows:
        ref, got = ort_run(fp32, w), ort_run(int8, w)
        diffs.append(np.abs(got - ref))
        same.extend(_argmax_same(ref, got))
    flat = np.concatenate([d.ravel() for d in diffs])
    return QuantizeResult(
        Path(int8_path), method, len(windows), float(flat.max()), float(flat.mean()),
        float(np.mean(same)),
    )


def _argmax_same(ref: np.ndarray, got: np.ndarray) -> list[bool]:
    """Per heatmap of ``(B, 3, H, W)`` logits: is the argmax pixel the same?"""
    a = ref.reshape(ref.shape[0] * ref.shape[1], -1).argmax(axis=1)
    b = got.reshape(got.shape[0] * got.shape[1], -1).argmax(axis=1)
    return (a == b).tolist()


__all__ = [
    "METHODS",
    "OUTPUT_NAME",
    "QuantizeResult",
    "calibration_windows",
    "clip_windows",
    "quantize_int8",
    "synthetic_windows",
]

"""A Triton Inference Server model repository for the exported network.

Layout::

    REPO/blurball/config.pbtxt
    REPO/blurball/1/model.onnx

``config.pbtxt`` names the ONNX file's real input and output (read back from the file, not
assumed), with dims without the batch dimension (Triton adds it: ``max_batch_size`` > 0),
dynamic batching with preferred sizes 1–3 (the worker's window batches) and warm-up requests for
batches 1, 2 and 3 so the first real request doesn't pay for graph optimisation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from torch import nn

from ttball.errors import UserError
from ttball.export.onnx import ExportResult, export_onnx
from ttball.results import atomic_write

MODEL_NAME = "blurball"
WARMUP_BATCHES = (1, 2, 3)
MAX_BATCH_SIZE = 2**31 - 1  # config.pbtxt's max_batch_size is an int32
MAX_QUEUE_DELAY_US = 2000
"""How long Triton may hold a request to batch it with others: a tenth of a 25 fps frame
interval, so batching never costs a live stream a frame (not measured on a server yet)."""

_TRITON_TYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "TYPE_FP32",
    onnx.TensorProto.FLOAT16: "TYPE_FP16",
}


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output: name, Triton dtype, dims without the batch dimension."""

    name: str
    data_type: str
    dims: tuple[int, ...]


def tensor_specs(model_path: str | os.PathLike[str]) -> tuple[TensorSpec, TensorSpec]:
    """The (input, output) of the ONNX file, checked to have a dynamic batch dimension."""
    if not Path(model_path).is_file():
        raise UserError(f"ONNX file not found: {model_path}")
    try:
        graph = onnx.load(str(model_path), load_external_data=False).graph
    except (DecodeError, OSError, ValueError) as exc:  # not protobuf, unreadable, truncated
        raise UserError(f"{model_path}: not an ONNX model ({type(exc).__name__})") from None
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise UserError(f"{model_path}: expected one input and one output")
    return _spec(graph.input[0], model_path), _spec(graph.output[0], model_path)


def _spec(value: onnx.ValueInfoProto, path: str | os.PathLike[str]) -> TensorSpec:
    t = value.type.tensor_type
    dims = t.shape.dim
    if not dims or dims[0].dim_value:
        raise UserError(f"{path}: {value.name} has a fixed batch size; export with a dynamic batch")
    if t.elem_type not in _TRITON_TYPES:
        raise UserError(f"{path}: {value.name} has element type {t.elem_type}, not float/float16")
    return TensorSpec(value.name, _TRITON_TYPES[t.elem_type], tuple(d.dim_value for d in dims[1:]))


def _check_max_batch_size(max_batch_size: int) -> None:
    if not max(WARMUP_BATCHES) <= max_batch_size <= MAX_BATCH_SIZE:
        raise UserError(f"max batch size must be in [{max(WARMUP_BATCHES)}, {MAX_BATCH_SIZE}] "
                        f"(Triton's int32), got {max_batch_size}")


def render_config(
    inp: TensorSpec, out: TensorSpec, *, max_batch_size: int = 8, name: str = MODEL_NAME,
) -> str:
    """The text of ``config.pbtxt`` for an ONNX model with this input and output."""
    _check_max_batch_size(max_batch_size)
    lines = [
        f'name: "{name}"',
        'platform: "onnxruntime_onnx"',
        f"max_batch_size: {max_batch_size}",
        _tensor_block("input", inp),
        _tensor_block("output", out),
        "dynamic_batching {",
        f"  preferred_batch_size: [ {', '.join(map(str, WARMUP_BATCHES))} ]",
        f"  max_queue_delay_microseconds: {MAX_QUEUE_DELAY_US}",
        "}",
        "model_warmup [",
        ",\n".join(_warmup(inp, b) for b in WARMUP_BATCHES),
        "]",
    ]
    return "\n".join(lines) + "\n"


def _dims(spec: TensorSpec) -> str:
    return f"[ {', '.join(map(str, spec.dims))} ]"


def _tensor_block(kind: str, spec: TensorSpec) -> str:
    return (f"{kind} [\n  {{\n    name: \"{spec.name}\"\n    data_type: {spec.data_type}\n"
            f"    dims: {_dims(spec)}\n  }}\n]")


def _warmup(inp: TensorSpec, batch: int) -> str:
    return (f"  {{\n    name: \"batch{batch}\"\n    batch_size: {batch}\n    inputs {{\n"
            f"      key: \"{inp.name}\"\n      value {{\n        data_type: {inp.data_type}\n"
            f"        dims: {_dims(inp)}\n        random_data: true\n      }}\n    }}\n  }}")


@dataclass(frozen=True)
class TritonRepo:
    """What :func:`write_triton_repo` wrote; ``export`` is None when an existing file was copied."""

    config: Path
    model: Path
    export: ExportResult | None


def write_triton_repo(
    model: nn.Module | None,
    repo: str | os.PathLike[str],
    *,
    source: str | os.PathLike[str] | None = None,
    fp16: bool = False,
    height: int = 288,
    width: int = 512,
    max_batch_size: int = 8,
) -> TritonRepo:
    """Write ``repo`` with Triton model ``blurball``, version 1: ``model`` exported (dynamic
    batch; FP16 folds BatchNorm in FP32 first), or the ONNX file ``source`` copied as it is."""
    if (model is None) == (source is None):
        raise UserError("give either a model to export or an ONNX file to copy, not both")
    _check_max_batch_size(max_batch_size)
    if source is not None:
        tensor_specs(source)  # refuse a file Triton could not batch before writing anything
    model_dir = Path(repo) / MODEL_NAME
    version_dir = model_dir / "1"
    try:
        version_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {version_dir}: {exc.strerror or exc}") from None
    target, config = version_dir / "model.onnx", model_dir / "config.pbtxt"
    for path in (target, config):  # both checked before either is written
        if path.is_dir():
            raise UserError(f"{path} is a folder; cannot write a file in its place")
    result = None
    if source is not None:
        _copy(Path(source), target)
    else:
        assert model is not None
        result = export_onnx(model, target, fp16=fp16, fold_bn=fp16, dynamic_batch=True,
                             height=height, width=width)
    inp, out = tensor_specs(target)
    with atomic_write(config) as f:
        f.write(render_config(inp, out, max_batch_size=max_batch_size))
    return TritonRepo(config, target, result)


def _copy(source: Path, target: Path) -> None:
    if not source.is_file():
        raise UserError(f"ONNX file not found: {source}")
    with atomic_write(target, "wb") as f:
        f.write(source.read_bytes())

"""Export the network to ONNX: one self-describing file that a runtime can use without ttball.

The graph has one input ``frames`` (B, 9, H, W) float — three normalised RGB frames, oldest
first, stacked on channels — and one output ``heatmaps`` (B, 3, H, W) float: logits, one heatmap
per input frame, before sigmoid. Everything pre- and post-processing need (size, mean/std, resize,
score threshold, layout, weights checksum) is written to the file's ``metadata_props``
(:func:`read_metadata` reads it back).

The exporter is torch's ``torch.export``-based one (``dynamo=True``): it gives a clean graph
(``Gemm`` for the squeeze-excitation layers, no ``Constant``/``Unsqueeze`` scaffolding), where the
TorchScript exporter adds 43 ``Constant`` and 36 extra ``Unsqueeze`` nodes. Both fold every
BatchNorm of the eval-mode network into its convolution and drop the three fuse paths of
``stage4`` whose outputs the head never reads, leaving 59 ``Conv`` (measured with torch 2.13).
"""

from __future__ import annotations

import copy
import io
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import Tensor, nn

from ttball.errors import UserError
from ttball.model.blurball import check_input_size
from ttball.model.config import WeightsConfig
from ttball.model.weights import state_dict_sha256
from ttball.results import atomic_write

INPUT_NAME = "frames"
OUTPUT_NAME = "heatmaps"
EXPORTERS = ("dynamo", "torchscript")
DEFAULT_OPSET = {"dynamo": 18, "torchscript": 17}
"""Each exporter's own default opset: the dynamo exporter converts other opsets after the fact."""
LAYOUT = "NCHW; channel = 3*frame + (0 R, 1 G, 2 B), frames oldest first"


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_onnx` wrote and how well ONNX Runtime's run of it matches eager FP32.

    ``max_abs_diff`` is max |ort − eager| over the logits of one seeded random window;
    ``max_rel_diff`` is that divided by max |eager|.
    """

    path: Path
    exporter: str
    opset: int
    precision: str
    max_abs_diff: float
    max_rel_diff: float

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "path": str(self.path)}


class Heatmaps(nn.Module):
    """The network with a tensor output: ``frames (B, 9, H, W) -> heatmaps (B, 3, H, W)``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, frames: Tensor) -> Tensor:
        return self.model(frames)[0]


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every BatchNorm folded into its convolution (in float64)."""
    from ttball.passes.fold_bn import fold_batchnorm as fold

    folded, _ = fold(model)
    return folded


def build_metadata(
    config: WeightsConfig, *, sha256: str, precision: str, exporter: str, opset: int,
    height: int, width: int, dynamic_batch: bool, fold_bn: bool,
) -> dict[str, str]:
    """The ``metadata_props`` of an exported file: all a consumer needs, as strings."""
    from ttball import __version__

    batch = "B" if dynamic_batch else "1"
    return {
        "ttball.version": __version__,
        "ttball.config": config.evolve(
            sha256=sha256, input_height=height, input_width=width
        ).to_json(),
        "weights_name": config.name,
        "weights_sha256": sha256,
        "input_name": INPUT_NAME,
        "input_shape": f"{batch},{3 * config.frames_in},{height},{width}",
        "input_height": str(height),
        "input_width": str(width),
        "frames_in": str(config.frames_in),
        "layout": LAYOUT,
        "color": "RGB",
        "scale": "1/255",
        "mean": ",".join(f"{v:g}" for v in config.mean),
        "std": ",".join(f"{v:g}" for v in config.std),
        "resize": f"{config.resize}, straight to {width}x{height} (aspect not kept)",
        "output_name": OUTPUT_NAME,
        "output_shape": f"{batch},{config.frames_in},{height},{width}",
        "output": "logits, one heatmap per input frame; apply sigmoid, then score_threshold",
        "score_threshold": f"{config.score_threshold:g}",
        "precision": precision,
        "bn_folded": str(fold_bn).lower(),
        "exporter": f"torch.onnx.export(dynamo={exporter == 'dynamo'}) torch {torch.__version__}",
        "opset": str(opset),
    }


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``metadata_props`` of an ONNX file as a dict (weights are not loaded)."""
    model = onnx.load(str(path), load_external_data=False)
    return {p.key: p.value for p in model.metadata_props}


def _trace(
    wrapped: nn.Module, example: Tensor, exporter: str, opset: int, dynamic_batch: bool
) -> onnx.ModelProto:
    if exporter == "dynamo":
        shapes = {INPUT_NAME: {0: torch.export.Dim("batch", min=1, max=1024)}} if dynamic_batch else None
        # four "torchvision is not installed. Skipping torchvision::nms" lines an export: its
        # operator registry's notice about operators this network never uses
        logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.export's own pytree notices
            program = torch.onnx.export(
                wrapped, (example,), input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                opset_version=opset, dynamo=True, external_data=False, verbose=False,
                dynamic_shapes=shapes,
            )
        assert program is not None
        return program.model_proto
    buffer = io.BytesIO()
    axes = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if dynamic_batch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter's notice
        torch.onnx.export(  # its stubs say a path; a file object works
            wrapped, (example,), buffer,  # type: ignore[arg-type]
            input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
            opset_version=opset, dynamo=False, dynamic_axes=axes, do_constant_folding=True,
        )
    return onnx.load_from_string(buffer.getvalue())


def _opset(proto: onnx.ModelProto) -> int:
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def save_model(model: onnx.ModelProto, path: str | os.PathLike[str]) -> None:
    """Write ``model`` as one file (weights inline), atomically."""
    with atomic_write(path, "wb") as f:
        f.write(model.SerializeToString())


def check_size(height: int, width: int) -> None:
    """One line unless ``height`` x ``width`` is an input the network takes (stride 8)."""
    try:
        check_input_size(height, width)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def export_onnx(
    model: nn.Module,
    path: str | os.PathLike[str],
    *,
    fp16: bool = False,
    fold_bn: bool = False,
    dynamic_batch: bool = False,
    opset: int | None = None,
    height: int = 288,
    width: int = 512,
    exporter: str = "dynamo",
) -> ExportResult:
    """Export ``model`` (a :class:`~ttball.model.BlurBall`) to ``path`` and check it.

    ``fp16`` stores weights, input and output as float16 (for GPU runtimes; ONNX Runtime's CPU
    provider runs it through inserted casts). ``fold_bn`` folds BatchNorm in torch (in float64,
    :mod:`ttball.passes.fold_bn`) before export; the exporters fold it anyway, so this only
    matters with ``fp16`` (folding before the cast keeps more precision). The file is checked with ``onnx.checker``, run once in ONNX
    Runtime and compared with eager FP32.
    """
    if exporter not in EXPORTERS:
        raise UserError(f"unknown exporter {exporter!r}; use one of {', '.join(EXPORTERS)}")
    check_size(height, width)
    opset = opset or DEFAULT_OPSET[exporter]
    model = model.eval()
    config = getattr(model, "config", None) or WeightsConfig()
    sha256 = state_dict_sha256(model.state_dict())
    net = fold_batchnorm(model) if fold_bn else model
    dtype = torch.float16 if fp16 else torch.float32
    if fp16:
        net = (net if fold_bn else copy.deepcopy(model)).half()  # never change the caller's model
    wrapped = Heatmaps(net).eval()
    example = torch.zeros(1, 3 * config.frames_in, height, width, dtype=dtype)
    proto = _trace(wrapped, example, exporter, opset, dynamic_batch)
    model.eval()  # exporters restore modes through train(), which reaches every submodule
    got = _opset(proto)
    if got != opset:
        raise UserError(
            f"the {exporter} exporter wrote opset {got}, not the requested {opset}; "
            f"use opset {DEFAULT_OPSET[exporter]} or the other exporter"
        )
    onnx.helper.set_model_props(proto, build_metadata(
        config, sha256=sha256, precision="fp16" if fp16 else "fp32", exporter=exporter,
        opset=opset, height=height, width=width, dynamic_batch=dynamic_batch, fold_bn=fold_bn,
    ))
    proto.doc_string = "BlurBall ball detector exported by ttball; see metadata_props"
    onnx.checker.check_model(proto, full_check=True)
    save_model(proto, path)
    max_abs, max_rel = compare_with_eager(model, path, height=height, width=width)
    return ExportResult(Path(path), exporter, opset, "fp16" if fp16 else "fp32", max_abs, max_rel)


def random_window(height: int, width: int, batch: int = 1, seed: int = 0) -> np.ndarray:
    """A seeded standard-normal ``(batch, 9, height, width)`` float32 window."""
    gen = np.random.default_rng(seed)
    return gen.standard_normal((batch, 9, height, width), dtype=np.float32)


@torch.inference_mode()
def eager_logits(model: nn.Module, window: np.ndarray) -> np.ndarray:
    """Eager FP32 logits ``(B, 3, H, W)`` of ``model`` on ``window`` (B, 9, H, W)."""
    return model.float()(torch.from_numpy(window))[0].numpy()


def ort_session(path: str | os.PathLike[str]) -> Any:
    """A default ONNX Runtime CPU session (all graph optimisations, one thread per core)."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def ort_run(session: Any, window: np.ndarray) -> np.ndarray:
    """Logits of ``session`` on ``window`` (cast to the model's input dtype), as float32."""
    feed = window.astype(np.float16) if "float16" in session.get_inputs()[0].type else window
    return np.asarray(session.run([OUTPUT_NAME], {INPUT_NAME: feed})[0], dtype=np.float32)


def ort_logits(path: str | os.PathLike[str], window: np.ndarray) -> np.ndarray:
    """Logits of the ONNX file at ``path`` in a default ONNX Runtime CPU session, as float32."""
    return ort_run(ort_session(path), window)


def compare_with_eager(
    model: nn.Module, path: str | os.PathLike[str], *, height: int, width: int,
    window: np.ndarray | None = None,
) -> tuple[float, float]:
    """(max abs, max abs relative to max |eager|) difference between ORT and eager FP32."""
    window = random_window(height, width) if window is None else window
    ref = eager_logits(model, window)
    got = ort_logits(path, window)
    max_abs = float(np.abs(got - ref).max())
    return max_abs, max_abs / max(float(np.abs(ref).max()), 1e-12)

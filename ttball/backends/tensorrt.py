"""TensorRT FP16 engines built from an ONNX export of the network (``tensorrt`` Python API).

Listed but unavailable where the ``tensorrt`` package is missing or there is no CUDA device; the
reason says which. Each batch shape gets its own static engine, built on the shape's first call
(ONNX export + engine build: that is the first-call time) and cached as
``cache_dir/<weights sha>-<B>x<H>x<W>-<precision>-trt<version>-<GPU>.engine`` when a cache
directory is given, so a restart deserialises instead of rebuilding. Inputs and outputs stay
FP32 (``(B, 9, H, W)`` in, ``(B, 3, H, W)`` out); FP16 is TensorRT's internal precision.

Written against the TensorRT 10 API (``execute_async_v3`` with tensor addresses; also in 8.6).
Not yet run: this machine has no GPU and no ``tensorrt`` package.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ttball.backends._recipe import Recipe, prepare_model, register_recipes
from ttball.backends.base import BackendBase
from ttball.errors import BackendUnavailable, UserError
from ttball.results import atomic_write

INPUT, OUTPUT = "frames", "logits"
ONNX_OPSET = 18  # the dynamo exporter's lowest native opset in torch 2.13 (17 needs conversion)
WORKSPACE_BYTES = 4 << 30  # tactic scratch limit; a guess (unmeasured), ample for 1.5 M parameters


def tensorrt_missing(device: torch.device) -> str | None:
    reasons = []
    if importlib.util.find_spec("tensorrt") is None:
        reasons.append("tensorrt package not installed")
    if device.type != "cuda":
        reasons.append("needs a CUDA device")
    return "; ".join(reasons) or None


class _Logits(nn.Module):
    """The network with a tensor output (ONNX has no dict outputs)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)[0]


def export_onnx(model: nn.Module, path: str | os.PathLike[str], example: Tensor) -> Path:
    """Export ``model`` at ``example``'s static shape: input ``frames`` (B, 9, H, W) float32 →
    output ``logits`` (B, 3, H, W) float32, one self-contained file."""
    path = Path(path)
    wrapped = _Logits(model).eval()
    with torch.no_grad(), warnings.catch_warnings():
        # torch 2.13's exporter trips over its own pytree deprecation; nothing for us to fix.
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        torch.onnx.export(
            wrapped,
            (example,),
            str(path),
            input_names=[INPUT],
            output_names=[OUTPUT],
            opset_version=ONNX_OPSET,
            dynamo=True,
            external_data=False,
            verbose=False,
        )
    return path


class TensorRTBackend(BackendBase):
    """One TensorRT engine and execution context per batch shape."""

    def __init__(
        self,
        model: nn.Module,
        device: torch.device,
        recipe: Recipe | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(device)
        reason = tensorrt_missing(device)
        if reason:
            raise BackendUnavailable(reason)
        import tensorrt as trt

        recipe = Recipe.from_options(options, "tensorrt", ("cache_dir",), recipe=recipe)
        if recipe.autocast or recipe.channels_last:
            raise UserError("tensorrt chooses its own casts and layouts: use precision/fold only")
        self.trt, self.recipe, self.precision = trt, recipe, recipe.precision
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        # Export from an FP32 (optionally folded) copy on the GPU; TensorRT lowers precision.
        self.model = prepare_model(model, device, Recipe("fp32", fold=recipe.fold))
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else None
        self._engines: dict[tuple[int, ...], tuple[Any, Any]] = {}
        self._sha = _weights_sha(self.model)

    def _engine_path(self, shape: tuple[int, ...]) -> Path | None:
        if self.cache_dir is None:
            return None
        gpu = re.sub(r"[^A-Za-z0-9]+", "_", torch.cuda.get_device_name(self.device))
        dims = "x".join(str(s) for s in (shape[0], shape[2], shape[3]))
        name = f"{self._sha[:16]}-{dims}-{self.recipe.suffix()}-trt{self.trt.__version__}-{gpu}"
        return self.cache_dir / f"{name}.engine"

    def _build(self, batch: Tensor) -> bytes:
        trt = self.trt
        with tempfile.TemporaryDirectory() as tmp:
            onnx_bytes = export_onnx(self.model, Path(tmp) / "model.onnx", batch).read_bytes()
        builder = trt.Builder(self.logger)
        explicit = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
        flags = (
            1 << int(explicit)
            if explicit is not None and int(trt.__version__.split(".")[0]) < 10
            else 0
        )
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse(onnx_bytes):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT could not parse the ONNX export: {errors}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
        if self.recipe.precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        elif self.recipe.precision == "bf16":
            config.set_flag(trt.BuilderFlag.BF16)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise RuntimeError("TensorRT engine build failed (see the TensorRT log above)")
        return bytes(serialized)

    def _engine(self, batch: Tensor) -> tuple[Any, Any]:
        shape = tuple(batch.shape)
        if shape not in self._engines:
            path = self._engine_path(shape)
            if path is not None and path.is_file():
                plan = path.read_bytes()
            else:
                plan = self._build(batch)
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with atomic_write(path, "wb") as f:
                        f.write(plan)
            engine = self.runtime.deserialize_cuda_engine(plan)
            if engine is None:
                raise RuntimeError(f"TensorRT could not load the engine for shape {shape}")
            self._engines[shape] = (engine, engine.create_execution_context())
        return self._engines[shape]

    def run(self, batch: Tensor) -> Tensor:
        _, context = self._engine(batch)
        x = batch.float().contiguous()
        b, _, h, w = x.shape
        out = torch.empty((b, 3, h, w), dtype=torch.float32, device=self.device)
        context.set_input_shape(INPUT, tuple(x.shape))
        context.set_tensor_address(INPUT, x.data_ptr())
        context.set_tensor_address(OUTPUT, out.data_ptr())
        if not context.execute_async_v3(torch.cuda.current_stream(self.device).cuda_stream):
            raise RuntimeError("TensorRT execution failed")
        return out


def _weights_sha(model: nn.Module) -> str:
    from ttball.model import state_dict_sha256

    return state_dict_sha256(model.state_dict())


register_recipes(
    "tensorrt",
    TensorRTBackend,
    [Recipe("fp16")],
    "TensorRT engine from ONNX (TensorRT folds BN itself)",
    requires=tensorrt_missing,
    tags=("disk-cache",),
)

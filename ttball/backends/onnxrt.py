"""ONNX Runtime: the network exported once (cached on disk), run by an execution provider.

CPU entries differ only in session options and precision; CUDA and TensorRT entries are listed
everywhere and say why they can't run when ``onnxruntime`` lacks their provider. A session is
built per input size H×W on first use (the file has a dynamic batch dimension), so every batch
size of one size shares it.

Options every entry takes (``create(name, model, device, **options)``):
``graph_optimization_level`` (disable, basic, extended, layout, all), ``intra_op_threads``,
``inter_op_threads`` (0 = ORT's choice: one per physical core), ``execution_mode`` (sequential,
parallel), ``config`` (extra ``add_session_config_entry`` pairs such as
``{"session.intra_op.allow_spinning": "0"}``), ``cache_dir``; INT8 also ``calibrate`` (clips) or
``windows`` (preprocessed arrays; default: 16 synthetic rally windows) and ``method``.

``ort-mobile-*`` run the cached export converted to ONNX Runtime's own format for phones
(:mod:`ttball.export.ort`, platform ``arm``) as ONNX Runtime Mobile runs it, with no
optimisation at load: ``verify`` checks the graph a phone app gets. This machine's CPU kernels
run it, not an ARM core's (ARM's int8 x int8 and FP32 kernels round differently).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ttball.backends.base import BackendBase, needs_cuda, register
from ttball.errors import UserError
from ttball.export.onnx import INPUT_NAME, OUTPUT_NAME

LEVELS = ("disable", "basic", "extended", "layout", "all")
MODES = ("sequential", "parallel")

TUNED_CONFIG = {"session.intra_op.allow_spinning": "0"}
"""Chosen on the shared 2-core CPU of docs/benchmarks/cpu-onnx.md. Of the settings tried side
by side (load average 3.5), graph level ``all`` (with the NCHWc layout) beat ``extended``
(0.54 vs 0.87 s per window), parallel execution lost (1.00 s), flushing denormals changed
nothing, and not spinning beat spinning (0.54 vs 0.72 s): with other work on the cores, spinning
workers cost more than they save. The CPU time per window is the same either way (0.54 s): on
an idle machine spinning wins back some latency, and ``intra_op_threads=1`` was the fastest
setting under load (0.45 s)."""


@dataclass(frozen=True)
class SessionSettings:
    """What an ONNX Runtime session is built with; none of it changes the exported file."""

    providers: tuple[Any, ...] = ("CPUExecutionProvider",)
    graph_optimization_level: str = "all"
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    execution_mode: str = "sequential"
    config: Mapping[str, str] = field(default_factory=dict)

    def session_options(self) -> Any:
        import onnxruntime as ort

        if self.graph_optimization_level not in LEVELS:
            raise UserError(f"graph_optimization_level must be one of {', '.join(LEVELS)}")
        if self.execution_mode not in MODES:
            raise UserError(f"execution_mode must be one of {', '.join(MODES)}")
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel, f"ORT_{_LEVEL_NAMES[self.graph_optimization_level]}"
        )
        so.intra_op_num_threads = self.intra_op_threads
        so.inter_op_num_threads = self.inter_op_threads
        so.execution_mode = getattr(ort.ExecutionMode, f"ORT_{self.execution_mode.upper()}")
        so.log_severity_level = 3  # errors only: ORT's warnings about its own choices are noise here
        for key, value in self.config.items():
            so.add_session_config_entry(key, str(value))
        return so


_LEVEL_NAMES = {"disable": "DISABLE_ALL", "basic": "ENABLE_BASIC", "extended": "ENABLE_EXTENDED",
                "layout": "ENABLE_LAYOUT", "all": "ENABLE_ALL"}


class OnnxRuntimeBackend(BackendBase):
    """Runs the cached export of ``model`` in ONNX Runtime; one session per input size."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        *,
        precision: str = "fp32",
        settings: SessionSettings = SessionSettings(),
        cache_dir: str | os.PathLike[str] | None = None,
        calibrate: Sequence[str | os.PathLike[str]] = (),
        windows: Sequence[np.ndarray] = (),
        method: str | None = None,
        ort_platform: str | None = None,
    ) -> None:
        super().__init__(device)
        self.model = model.eval()
        self.precision = precision
        self.settings = settings
        self.export_options: dict[str, Any] = {"precision": precision, "cache_dir": cache_dir,
                               "calibrate": tuple(calibrate), "windows": tuple(windows),
                               "method": method}
        self.ort_platform = ort_platform  # set: run the export converted to .ort for it
        self.sessions: dict[tuple[int, int], Any] = {}
        self.paths: dict[tuple[int, int], Path] = {}

    def session(self, height: int, width: int) -> Any:
        """The session for ``height``×``width`` inputs, exporting the model first if needed."""
        import onnxruntime as ort

        key = (height, width)
        if key not in self.sessions:
            from ttball.export.cache import cached_onnx

            self.paths[key] = cached_onnx(
                self.model, height=height, width=width, **self.export_options
            )
            if self.ort_platform is not None:
                from ttball.export.ort import convert_to_ort, ort_file_session

                path = self.paths[key].with_suffix(f".{self.ort_platform}.ort")
                if not path.exists():
                    convert_to_ort(self.paths[key], path, platform=self.ort_platform)
                self.paths[key] = path
                self.sessions[key] = ort_file_session(path, self.settings.session_options())
                return self.sessions[key]
            self.sessions[key] = ort.InferenceSession(
                str(self.paths[key]), self.settings.session_options(),
                providers=list(self.settings.providers),
            )
        return self.sessions[key]

    def run(self, batch: Tensor) -> Tensor:
        session = self.session(batch.shape[2], batch.shape[3])
        x = batch.detach().to("cpu", torch.float32).contiguous().numpy()
        if self.precision == "fp16":
            x = x.astype(np.float16)
        out = session.run([OUTPUT_NAME], {INPUT_NAME: x})[0]
        return torch.from_numpy(np.asarray(out, np.float32)).to(self.device)


SESSION_OPTIONS = ("graph_optimization_level", "intra_op_threads", "inter_op_threads",
                   "execution_mode", "config")
"""The options of :class:`SessionSettings` an entry takes (``create`` refuses any other)."""
CALIBRATION_OPTIONS = ("calibrate", "windows", "method")
"""What an INT8 export is calibrated on (:func:`~ttball.export.cache.cached_onnx`): options of
INT8 entries only (the FP32 and FP16 exports are not calibrated)."""
OPTIONS = (*SESSION_OPTIONS, "cache_dir")
INT8_OPTIONS = (*OPTIONS, *CALIBRATION_OPTIONS)


def _settings(providers: tuple[Any, ...] = ("CPUExecutionProvider",), *,
              base_config: Mapping[str, str] | None = None, **options: Any) -> SessionSettings:
    config = {**(base_config or {}), **dict(options.pop("config", None) or {})}
    return replace(SessionSettings(providers=providers), config=config, **options)


_EXPORT_OPTIONS = ("cache_dir", *CALIBRATION_OPTIONS)


def _build(model: torch.nn.Module, device: torch.device, precision: str,
           providers: tuple[Any, ...] = ("CPUExecutionProvider",),
           base_config: Mapping[str, str] | None = None, ort_platform: str | None = None,
           **options: Any) -> OnnxRuntimeBackend:
    export = {k: options.pop(k) for k in _EXPORT_OPTIONS if k in options}
    settings = _settings(providers, base_config=base_config, **options)
    return OnnxRuntimeBackend(model, device, precision=precision, settings=settings,
                              ort_platform=ort_platform, **export)


def _cpu_only(device: torch.device) -> str | None:
    if device.type != "cpu":
        return "runs on CPU only"
    return _ort_missing()


def _ort_missing() -> str | None:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return "onnxruntime not installed"
    return None


def _provider(name: str) -> Any:
    def requires(device: torch.device) -> str | None:
        reason = _ort_missing() or needs_cuda(device)
        if reason:
            return reason
        import onnxruntime as ort

        if name not in ort.get_available_providers():
            return f"onnxruntime has no {name} here (it needs the onnxruntime-gpu package)"
        return None

    return requires


@register("onnxrt-fp32", description="ONNX Runtime CPU, FP32, default session",
          requires=_cpu_only, tags=("onnx", "disk-cache", "cpu"), options=OPTIONS)
def _onnxrt_fp32(model: torch.nn.Module, device: torch.device, **options: Any) -> OnnxRuntimeBackend:
    return _build(model, device, "fp32", **options)


@register("onnxrt-fp32-tuned", description="ONNX Runtime CPU, FP32, NCHWc layout, no spinning",
          requires=_cpu_only, tags=("onnx", "disk-cache", "cpu"), options=OPTIONS)
def _onnxrt_fp32_tuned(model: torch.nn.Module, device: torch.device, **options: Any) -> OnnxRuntimeBackend:
    return _build(model, device, "fp32", base_config=TUNED_CONFIG, **options)


@register("onnxrt-int8", description="ONNX Runtime CPU, INT8 QDQ, int8 weights and activations",
          requires=_cpu_only, tags=("onnx", "disk-cache", "cpu", "int8"), options=INT8_OPTIONS)
def _onnxrt_int8(model: torch.nn.Module, device: torch.device, **options: Any) -> OnnxRuntimeBackend:
    return _build(model, device, "int8", base_config=TUNED_CONFIG, **options)


@register("ort-mobile-fp32", description="ONNX Runtime Mobile's .ort (arm) of the FP32 "
          "export, run as a phone runs it, on this CPU", requires=_cpu_only,
          tags=("onnx", "disk-cache", "cpu", "mobile"), options=OPTIONS)
def _ort_mobile_fp32(model: torch.nn.Module, device: torch.device, **options: Any) -> OnnxRuntimeBackend:
    return _build(model, device, "fp32", base_config=TUNED_CONFIG, ort_platform="arm", **options)


@register("ort-mobile-int8", description="ONNX Runtime Mobile's .ort (arm) of the INT8 QDQ "
          "export, run as a phone runs it, on this CPU", requires=_cpu_only,
          tags=("onnx", "disk-cache", "cpu", "mobile", "int8"), options=INT8_OPTIONS)
def _ort_mobile_int8(model: torch.nn.Module, device: torch.device, **options: Any) -> OnnxRuntimeBackend:
    return _build(model, device, "int8", base_config=TUNED_CONFIG, ort_platform="arm", **options)


def _cuda_device_id(device: torch.device) -> dict[str, str]:
    return {"device_id": str(device.index or 0)}


@register("onnxrt-cuda-fp32", description="ONNX Runtime CUDA execution provider, FP32",
          requires=_provider("CUDAExecutionProvider"), tags=("onnx", "disk-cache", "gpu"),
          options=OPTIONS)
def _onnxrt_cuda_fp32(model: torch.nn.Module, device: torch.device, **options: Any) -> OnnxRuntimeBackend:
    providers = (("CUDAExecutionProvider", _cuda_device_id(device)),)
    return _build(model, device, "fp32", providers, **options)


@register("onnxrt-cuda-fp16", description="ONNX Runtime CUDA execution provider, FP16 export",
          requires=_provider("CUDAExecutionProvider"), tags=("onnx", "disk-cache", "gpu", "fp16"),
          options=OPTIONS)
def _onnxrt_cuda_fp16(model: torch.nn.Module, device: torch.device, **options: Any) -> OnnxRuntimeBackend:
    providers = (("CUDAExecutionProvider", _cuda_device_id(device)),)
    return _build(model, device, "fp16", providers, **options)


@register("onnxrt-tensorrt-fp16", description="ONNX Runtime TensorRT execution provider, FP16",
          requires=_provider("TensorrtExecutionProvider"),
          tags=("onnx", "disk-cache", "gpu", "fp16"),
          options=OPTIONS)
def _onnxrt_tensorrt_fp16(model: torch.nn.Module, device: torch.device, **options: Any) -> OnnxRuntimeBackend:
    from ttball.export.cache import cache_root

    engines = cache_root(options.get("cache_dir")) / "tensorrt"
    trt = {**_cuda_device_id(device), "trt_fp16_enable": "True",
           "trt_engine_cache_enable": "True", "trt_engine_cache_path": str(engines)}
    providers = (("TensorrtExecutionProvider", trt),
                 ("CUDAExecutionProvider", _cuda_device_id(device)))
    return _build(model, device, "fp32", providers, **options)

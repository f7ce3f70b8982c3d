"""OpenVINO on CPU: the same cached ONNX export as :mod:`ttball.backends.onnxrt`, compiled by
OpenVINO's CPU plugin for each batch shape on first use (static shapes are its fast path).

``openvino-fp32`` pins inference precision to f32 (on CPUs with AMX the plugin's default is
bf16); ``openvino-bf16`` asks for bf16 matmuls/convolutions (AMX or AVX-512 BF16);
``openvino-int8`` runs the INT8 QDQ file of ``onnxrt-int8`` with OpenVINO's integer kernels.
Options: ``threads`` (0 = the plugin's choice), ``hint`` (LATENCY or THROUGHPUT), ``config``
(extra compile properties), ``cache_dir``; INT8 also ``calibrate``/``windows``/``method``
(default: calibrated on 16 synthetic rally windows).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ttball.backends.base import BackendBase, register
from ttball.backends.onnxrt import CALIBRATION_OPTIONS
from ttball.errors import UserError
from ttball.export.onnx import INPUT_NAME, OUTPUT_NAME


class OpenVinoBackend(BackendBase):
    """Runs the cached ONNX export of ``model`` with OpenVINO; one compiled model per shape."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        *,
        precision: str = "fp32",
        inference_precision: str = "f32",
        threads: int = 0,
        hint: str = "LATENCY",
        config: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        calibrate: Sequence[str | os.PathLike[str]] = (),
        windows: Sequence[np.ndarray] = (),
        method: str | None = None,
    ) -> None:
        import openvino as ov

        from ttball.export.cache import cache_root

        super().__init__(device)
        if hint not in ("LATENCY", "THROUGHPUT"):
            raise UserError(f"openvino hint must be LATENCY or THROUGHPUT, not {hint!r}")
        self.model = model.eval()
        self.core = ov.Core()
        self.core.set_property({"CACHE_DIR": str(cache_root(cache_dir) / "openvino")})
        self.properties = {"INFERENCE_PRECISION_HINT": inference_precision,
                           "PERFORMANCE_HINT": hint, **dict(config or {})}
        if threads:
            self.properties["INFERENCE_NUM_THREADS"] = int(threads)
        self.export_options: dict[str, Any] = {"precision": precision, "cache_dir": cache_dir,
                               "calibrate": tuple(calibrate), "windows": tuple(windows),
                               "method": method}
        self.paths: dict[tuple[int, int], Path] = {}
        self.requests: dict[tuple[int, int, int], Any] = {}

    def request(self, batch: int, height: int, width: int) -> Any:
        """The infer request for ``(batch, 9, height, width)``, compiling on first use."""
        from ttball.export.cache import cached_onnx

        key = (batch, height, width)
        if key not in self.requests:
            if (height, width) not in self.paths:
                self.paths[height, width] = cached_onnx(
                    self.model, height=height, width=width, **self.export_options
                )
            net = self.core.read_model(str(self.paths[height, width]))
            net.reshape({INPUT_NAME: [batch, 9, height, width]})
            compiled = self.core.compile_model(net, "CPU", self.properties)
            self.requests[key] = compiled.create_infer_request()
        return self.requests[key]

    def run(self, batch: Tensor) -> Tensor:
        b, _, h, w = batch.shape
        request = self.request(b, h, w)
        x = batch.detach().to("cpu", torch.float32).contiguous().numpy()
        request.infer({INPUT_NAME: x})
        out = np.array(request.get_tensor(OUTPUT_NAME).data, dtype=np.float32, copy=True)
        return torch.from_numpy(out).to(self.device)


OPTIONS = ("threads", "hint", "config", "cache_dir")
"""What an entry takes; its factory fixes ``precision`` and ``inference_precision``."""
INT8_OPTIONS = (*OPTIONS, *CALIBRATION_OPTIONS)


def _openvino_missing(device: torch.device) -> str | None:
    try:
        import openvino  # noqa: F401
    except ImportError:
        return "openvino not installed (pip install openvino)"
    if device.type != "cpu":
        return "runs on CPU only"
    return None


def _needs_bf16(device: torch.device) -> str | None:
    reason = _openvino_missing(device)
    if reason:
        return reason
    import openvino as ov

    if "BF16" not in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        return "this CPU has no bf16 support (needs AVX-512 BF16 or AMX)"
    return None


@register("openvino-fp32", description="OpenVINO CPU, FP32 (inference precision pinned to f32)",
          requires=_openvino_missing, tags=("onnx", "disk-cache", "cpu"), options=OPTIONS)
def _openvino_fp32(model: torch.nn.Module, device: torch.device, **options: Any) -> OpenVinoBackend:
    return OpenVinoBackend(model, device, precision="fp32", inference_precision="f32", **options)


@register("openvino-bf16", description="OpenVINO CPU, bf16 convolutions (AMX / AVX-512 BF16)",
          requires=_needs_bf16, tags=("onnx", "disk-cache", "cpu", "bf16"), options=OPTIONS)
def _openvino_bf16(model: torch.nn.Module, device: torch.device, **options: Any) -> OpenVinoBackend:
    return OpenVinoBackend(model, device, precision="fp32", inference_precision="bf16", **options)


@register("openvino-int8", description="OpenVINO CPU, INT8 QDQ (the onnxrt-int8 file), integer kernels",
          requires=_openvino_missing, tags=("onnx", "disk-cache", "cpu", "int8"),
          options=INT8_OPTIONS)
def _openvino_int8(model: torch.nn.Module, device: torch.device, **options: Any) -> OpenVinoBackend:
    return OpenVinoBackend(model, device, precision="int8", inference_precision="f32", **options)

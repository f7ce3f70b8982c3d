"""Exported forms of the network: ONNX (FP32, FP16, INT8), ONNX Runtime Mobile's ``.ort`` for
phones, cached exports for the ONNX backends, and a Triton model repository."""

from ttball.export.onnx import (
    INPUT_NAME,
    OUTPUT_NAME,
    ExportResult,
    export_onnx,
    read_metadata,
)
from ttball.export.ort import OrtExport, convert_to_ort
from ttball.export.quantize import QuantizeResult, calibration_windows, quantize_int8
from ttball.export.triton import TritonRepo, write_triton_repo

__all__ = [
    "INPUT_NAME",
    "OUTPUT_NAME",
    "ExportResult",
    "OrtExport",
    "QuantizeResult",
    "TritonRepo",
    "calibration_windows",
    "convert_to_ort",
    "export_onnx",
    "quantize_int8",
    "read_metadata",
    "write_triton_repo",
]

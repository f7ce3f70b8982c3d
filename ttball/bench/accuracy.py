"""Agreement of a variant's heatmap logits with eager FP32 on the same input: one tolerance per
precision, used by ``ttball bench`` and by the backend parity tests.

``rel_err`` is ‖out − ref‖ / ‖ref‖ over the whole ``(B, 3, H, W)`` logits. The tolerances sit
about 5× above what was measured: on the H200 baseline (vs float64) FP32 variants 1.1e-6,
FP16 2.0e-3, BF16 1.4e-2; on CPU at 72×128 with randomised BN, FP32 folded/compiled ~2e-7,
FP16 7e-4, BF16 5e-3. INT8 (ONNX Runtime / OpenVINO QDQ backends) uses the bound their own
tests hold them to.
"""

from __future__ import annotations

from torch import Tensor

TOLERANCES: dict[str, float] = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2, "int8": 1e-1}


def agreement(out: Tensor, ref: Tensor) -> dict[str, float]:
    """``max_abs_err`` and ``rel_err`` of ``out`` against ``ref`` (computed in float64)."""
    diff = out.double() - ref.double()
    return {
        "max_abs_err": diff.abs().max().item(),
        "rel_err": (diff.norm() / ref.double().norm().clamp_min(1e-30)).item(),
    }


def tolerance(precision: str) -> float:
    return TOLERANCES.get(precision, TOLERANCES["fp32"])

"""Where a call's time goes, by category, from :mod:`torch.profiler`.

On CUDA: every device activity (kernels, memcpy, memset) with its GPU time, by kernel name.
On CPU: every profiled op's self CPU time, by op name; an op is counted once where its category
starts (``aten::batch_norm`` counts, its ``aten::native_batch_norm`` child does not).
Compiled CPU graphs run inductor's fused C++ kernels without per-kernel records: their time is
the compiled region's self time, counted as elementwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import DeviceType

from ttball.backends.base import synchronize

CATEGORIES = ("conv", "batch_norm", "elementwise", "gemm", "copy", "other")

# Ordered: the first rule that matches names the category. Triton kernels are named by what
# inductor fused (triton_poi_fused_add_relu_3, triton_tem_fused_convolution_0, ...).
_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("copy", re.compile(r"^memcpy|^memset|memcpy dtod|memset \(")),
    ("conv", re.compile(r"^triton_\w*conv")),
    ("gemm", re.compile(r"^triton_\w*(?:_mm|addmm|bmm)")),
    ("elementwise", re.compile(r"^triton_")),
    ("batch_norm", re.compile(r"batch_?norm|\bbn_fw|bn_fw_|::bn_")),
    ("conv", re.compile(r"conv|fprop|implicit_gemm|implicit_convolve|winograd|dgrad")),
    ("copy", re.compile(r"copy|nchwtonhwc|nhwctonchw|contiguous|clone|transpose")),
    ("gemm", re.compile(r"gemm|gemv|addmm|matmul|aten::mm$|aten::linear|cutlass|cublas")),
    (
        "elementwise",
        re.compile(
            r"elementwise|vectorized|reduce|relu|sigmoid|aten::add|aten::mul|aten::mean|upsample"
            r"|fused|clamp|threshold|compiledfxgraph|compiled region|cpp_fused|pointwise|aten::sum"
        ),
    ),
]


def classify(name: str) -> str:
    """Category of a kernel or op name (one of :data:`CATEGORIES`)."""
    lowered = name.lower()
    for category, pattern in _RULES:
        if pattern.search(lowered):
            return category
    return "other"


def _is_device(event: Any) -> bool:
    return event.device_type in (DeviceType.CUDA, DeviceType.PrivateUse1)


def _empty() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in CATEGORIES:
        out[f"prof_{c}_ms"] = 0.0
        out[f"prof_{c}_n"] = 0.0
    return out


def _cuda_summary(events: list[Any], calls: int) -> dict[str, Any]:
    out = _empty()
    kernels = 0
    for e in events:
        if not _is_device(e):
            continue
        cat = classify(e.name)
        out[f"prof_{cat}_ms"] += (e.time_range.end - e.time_range.start) / 1e3 / calls
        out[f"prof_{cat}_n"] += 1 / calls
        kernels += not e.name.lower().startswith(("memcpy", "memset"))
    out["kernels_per_call"] = kernels / calls
    out["prof_unit"] = "GPU time of CUDA kernels/memcpy per call"
    return out


def _starts_category(event: Any, cat: str) -> bool:
    parent = event.cpu_parent
    return parent is None or classify(parent.name) != cat


def _cpu_summary(events: list[Any], calls: int) -> dict[str, Any]:
    out = _empty()
    for e in events:
        if _is_device(e) or e.is_async:
            continue
        cat = classify(e.name)
        out[f"prof_{cat}_ms"] += e.self_cpu_time_total / 1e3 / calls
        out[f"prof_{cat}_n"] += _starts_category(e, cat) / calls
    out["kernels_per_call"] = None
    out["prof_unit"] = "CPU self time of profiled ops per call"
    return out


def profile_calls(fn: Callable[[], object], device: torch.device, calls: int) -> dict[str, Any]:
    """Profile ``calls`` calls of ``fn`` (already warm); per-call time and count by category:
    ``prof_<category>_ms``, ``prof_<category>_n``, ``prof_total_ms``, ``kernels_per_call``."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    synchronize(device)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        synchronize(device)
    events = list(prof.events())
    summary = _cuda_summary(events, calls) if device.type == "cuda" else _cpu_summary(events, calls)
    summary["prof_total_ms"] = sum(summary[f"prof_{c}_ms"] for c in CATEGORIES)
    for c in CATEGORIES:
        summary[f"prof_{c}_ms"] = round(summary[f"prof_{c}_ms"], 4)
        summary[f"prof_{c}_n"] = round(summary[f"prof_{c}_n"], 1)
    return summary

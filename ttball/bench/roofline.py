"""The machine's limits for this network, measured in the same run as the variants.

Work per window (``network_cost``): FLOPs from :class:`torch.utils.flop_counter.FlopCounterMode`
(56.3 GFLOP at 288×512) and the per-layer memory floor, every convolution's input and output
read/written once (BN, ReLU, SE scaling and residual adds assumed fused): 287.8 M elements,
576 MB in FP16 at 288×512. Both are counted on the ``meta`` device, so nothing runs.

Ceilings (``Ceilings``): bandwidth from a large copy (bytes read + written per second), compute
from a large square matmul in the variant's dtype. A variant's share of the limit is its
achieved rate over the ceiling; ``floor_ms`` is the larger of the two bounds.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ttball.backends._recipe import DTYPES
from ttball.backends.base import synchronize

ITEMSIZE = {**{p: d.itemsize for p, d in DTYPES.items()}, "int8": 1}


@dataclass(frozen=True)
class NetworkCost:
    """Work for one window (batch 1) at ``height`` × ``width``."""

    height: int
    width: int
    flops: float
    conv_io_elements: int

    def floor_bytes(self, precision: str) -> float:
        return self.conv_io_elements * ITEMSIZE.get(precision, 4)


@functools.lru_cache(maxsize=8)
def network_cost(height: int, width: int) -> NetworkCost:
    from torch.utils.flop_counter import FlopCounterMode

    from ttball.model import BlurBall

    model = BlurBall().to("meta").eval()
    elements = [0]

    def count(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        elements[0] += inputs[0].numel() + output.numel()

    hooks = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, nn.Conv2d)]
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(torch.empty(1, 9, height, width, device="meta"))
    finally:
        for h in hooks:
            h.remove()
    return NetworkCost(height, width, float(counter.get_total_flops()), elements[0])


def _best_seconds(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    fn()
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        else:
            begin = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - begin)
    return best


# Sizes: large enough to leave caches and launch overhead behind (1 GiB copies / 8192³ matmul
# on a GPU); on CPU small enough to take about a second on two cores.
_COPY_ELEMENTS = {"cuda": 1 << 28, "cpu": 1 << 24}
_MATMUL_N = {"cuda": 8192, "cpu": 1024}


def measure_bandwidth(device: torch.device) -> float:
    """Bytes per second of a device-to-device copy (read + write)."""
    n = _COPY_ELEMENTS.get(device.type, 1 << 24)
    src = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = _best_seconds(lambda: dst.copy_(src), device, repeats=10)
    return 2 * src.nbytes / seconds


def measure_compute(device: torch.device, dtype: torch.dtype) -> float:
    """FLOP per second of an n×n×n matmul in ``dtype`` (TF32 as the run has set it)."""
    n = _MATMUL_N.get(device.type, 1024)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    seconds = _best_seconds(lambda: a @ b, device, repeats=5)
    return 2 * n**3 / seconds


@dataclass
class Ceilings:
    """Measured once per device (bandwidth) and per dtype (compute) in a run."""

    device: torch.device
    _bandwidth: float | None = None
    _compute: dict[str, float] = field(default_factory=dict)

    def bandwidth(self) -> float:
        if self._bandwidth is None:
            self._bandwidth = measure_bandwidth(self.device)
        return self._bandwidth

    def compute(self, precision: str) -> float | None:
        """Matmul FLOP/s in ``precision``; None where torch has no plain matmul for it (int8)."""
        if precision not in DTYPES:
            return None
        if precision not in self._compute:
            self._compute[precision] = measure_compute(self.device, DTYPES[precision])
        return self._compute[precision]

    def recheck(self, precision: str, achieved: float) -> float | None:
        """The compute ceiling, measured again (and the larger kept) if ``achieved`` FLOP/s is
        above it: a ceiling measured while the machine was busy (another process on a shared
        CPU) made a variant read over 100 %. Above it still, the share stays over 100 %."""
        peak = self.compute(precision)
        if peak is not None and achieved > peak:
            peak = max(peak, measure_compute(self.device, DTYPES[precision]))
            self._compute[precision] = peak
        return peak

    def as_dict(self) -> dict[str, float]:
        out = {"bandwidth_gbps": self.bandwidth() / 1e9}
        out.update({f"compute_tflops_{p}": v / 1e12 for p, v in self._compute.items()})
        return out


def roofline_columns(
    cost: NetworkCost, batch: int, precision: str, median_ms: float, ceilings: Ceilings
) -> dict[str, float | None]:
    """Achieved rates of one measured variant and their share of the ceilings."""
    seconds = median_ms / 1e3
    flops = cost.flops * batch
    floor = cost.floor_bytes(precision) * batch
    peak_flops, peak_bw = ceilings.recheck(precision, flops / seconds), ceilings.bandwidth()
    bounds = [floor / peak_bw] + ([flops / peak_flops] if peak_flops else [])
    return {
        "gflop_per_call": flops / 1e9,
        "floor_mb_per_call": floor / 1e6,
        "achieved_tflops": flops / seconds / 1e12,
        "achieved_floor_gbps": floor / seconds / 1e9,
        "ceiling_tflops": peak_flops / 1e12 if peak_flops else None,
        "ceiling_gbps": peak_bw / 1e9,
        "flop_share": flops / seconds / peak_flops if peak_flops else None,
        "bw_share": floor / seconds / peak_bw,
        "floor_ms": max(bounds) * 1e3,
    }

"""scripts/gpu_e2e.py's per-stage profile (the script itself needs a GPU for its numbers)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from script_env import load_script
from torch.autograd import DeviceType

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))  # the script's own helpers (_stages)
gpu_e2e = load_script("gpu_e2e")


def _event(name: str, start: int, end: int, device: DeviceType = DeviceType.CPU,
           thread: int = 1) -> SimpleNamespace:
    span = SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start)
    return SimpleNamespace(name=name, device_type=device, time_range=span, thread=thread)


def test_stage_rows_count_host_ranges_and_the_waits_inside_them_only() -> None:
    events = [
        _event("stage:decode", 0, 4000),
        _event("cudaStreamSynchronize", 1000, 1500),
        _event("cudaStreamSynchronize", 2000, 2100, thread=2),  # another thread's wait
        _event("stage:decode", 0, 9000, device=DeviceType.CUDA),  # the range's device side
        _event("stage:network", 5000, 6000),
        _event("cudaEventSynchronize", 7000, 8000),  # between stages
    ]
    rows, waits = gpu_e2e.stage_rows(events, pushes=2)
    assert rows["decode"] == pytest.approx({"host_ms": 2.0, "wait_ms": 0.25, "waits": 0.5})
    assert rows["network"] == pytest.approx({"host_ms": 0.5, "wait_ms": 0.0, "waits": 0})
    assert len(waits) == 3


def test_device_ms_sums_device_kernels_and_copies_only() -> None:
    cuda, cpu = DeviceType.CUDA, DeviceType.CPU
    averages = [SimpleNamespace(key="stage:network", device_type=cuda, self_device_time_total=9000.0),
                SimpleNamespace(key="conv_kernel", device_type=cuda, self_device_time_total=1500.0),
                SimpleNamespace(key="Memcpy DtoH (Device -> Pinned)", device_type=cuda,
                                self_device_time_total=500.0),
                # a host op's own device time is its kernels' again
                SimpleNamespace(key="aten::max_pool2d", device_type=cpu, self_device_time_total=700.0)]
    assert gpu_e2e.device_ms(averages) == pytest.approx(2.0)

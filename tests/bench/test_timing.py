"""Timing helpers: the device time of a call, apart from the host's time to launch it."""

from __future__ import annotations

import time

import pytest
import torch

from ttball.bench.timing import device_ms, group_ms


def test_device_ms_on_cpu_is_the_wall_clock() -> None:
    calls = []

    def fn() -> None:
        calls.append(1)
        time.sleep(0.002)

    ms = device_ms(fn, torch.device("cpu"), 3)
    assert 2.0 <= ms < 20.0
    assert len(calls) == 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_device_ms_leaves_out_a_slow_launch() -> None:
    """A tiny kernel behind 2 ms of host work per call: group_ms measures the host, device_ms
    the kernel (what a CUDA graph of such calls costs)."""
    cuda = torch.device("cuda")
    x = torch.zeros(1024, device=cuda)

    def slow_launch() -> None:
        time.sleep(0.002)
        x.add_(1)

    assert group_ms(slow_launch, cuda, 5) > 1.5
    assert device_ms(slow_launch, cuda, 5) < 0.2

"""ttball.cudasched against a fake CUDA driver (ctypes out-parameters written as the driver
would), and on a GPU against the real one in a fresh process; the driver's version from fake
NVML and driver libraries."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest
import torch

from ttball.cudasched import driver_version, primary_context, request_blocking_sync


class FakeDriver:
    """Two devices; device 1's primary context optionally active; records the flags set."""

    def __init__(self, flags: tuple[int, int] = (0, 0), active: tuple[int, int] = (0, 0),
                 devices: int = 2, init_rc: int = 0) -> None:
        self.flags, self.active = list(flags), list(active)
        self.devices, self.init_rc = devices, init_rc
        self.set_calls: list[tuple[int, int]] = []

    def cuInit(self, flags: int) -> int:
        return self.init_rc

    def cuDeviceGetCount(self, count) -> int:
        count._obj.value = self.devices
        return 0

    def cuDeviceGet(self, dev, index: int) -> int:
        dev._obj.value = 10 + index  # handles differ from ordinals
        return 0

    def cuDevicePrimaryCtxGetState(self, dev: int, flags, active) -> int:
        flags._obj.value, active._obj.value = self.flags[dev - 10], self.active[dev - 10]
        return 0

    def cuDevicePrimaryCtxSetFlags_v2(self, dev: int, flags: int) -> int:
        self.set_calls.append((dev, flags))
        self.flags[dev - 10] = flags
        return 0


def test_blocking_sync_is_set_on_every_idle_device_and_kept_flags_survive() -> None:
    driver = FakeDriver(flags=(0x08, 0x00))  # device 0 with another flag (MAP_HOST) set
    assert request_blocking_sync(driver) is None
    assert driver.set_calls == [(10, 0x0C), (11, 0x04)]
    assert primary_context(0, driver) == ("blocking_sync", False)
    assert request_blocking_sync(driver) is None and len(driver.set_calls) == 2  # already set


def test_an_active_context_or_no_device_is_reported_not_raised() -> None:
    driver = FakeDriver(flags=(0x01, 0x00), active=(0, 1))
    reason = request_blocking_sync(driver)
    assert reason is not None and "device 1" in reason and "already active" in reason
    assert primary_context(0, driver) == ("blocking_sync", False)  # device 0 was idle: set
    assert primary_context(1, driver) == ("auto", True)
    assert "no CUDA device" in str(request_blocking_sync(FakeDriver(devices=0)))
    assert "cuInit failed (CUresult 100)" == request_blocking_sync(FakeDriver(init_rc=100))
    assert primary_context(5, FakeDriver()) is None


def test_without_a_driver_it_says_so(monkeypatch) -> None:
    from ttball import cudasched

    monkeypatch.setattr(cudasched, "_driver", lambda: None)
    assert request_blocking_sync() == "no CUDA driver (libcuda.so.1)"
    assert primary_context() is None


def test_fake_out_parameters_are_ctypes_objects() -> None:
    """The fake reads ``byref(x)._obj``: the object byref wraps (what a real driver writes)."""
    value = ctypes.c_int(3)
    assert ctypes.byref(value)._obj is value


def _in_a_fresh_process(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by a new interpreter (its CUDA context not yet made)."""
    return subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pytorch_context_keeps_the_requested_blocking_sync() -> None:
    """In a fresh process: requested before PyTorch's first CUDA call, the primary context
    PyTorch then creates sleeps on waits."""
    code = (
        "import torch\n"
        "from ttball.cudasched import primary_context, request_blocking_sync\n"
        "assert request_blocking_sync() is None\n"
        "x = torch.ones(1 << 20, device='cuda'); torch.cuda.synchronize()\n"
        "assert primary_context(0) == ('blocking_sync', True), primary_context(0)\n"
        "print('ok')\n")
    out = _in_a_fresh_process(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_wait_events_block_only_where_the_context_sleeps(monkeypatch) -> None:
    """wait_event asks for cudaEventBlockingSync exactly when the primary context sleeps."""
    from ttball import cudasched

    monkeypatch.setattr(torch.cuda, "Event", lambda **kw: kw)
    for sched, blocking in (("blocking_sync", True), ("auto", False), (None, False)):
        cudasched.waits_sleep.cache_clear()
        monkeypatch.setattr(cudasched, "primary_context",
                            lambda index, s=sched: None if s is None else (s, True))
        assert cudasched.wait_event(True) == {"enable_timing": True, "blocking": blocking}
    cudasched.waits_sleep.cache_clear()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_wait_event_sleeps_where_a_plain_event_spins() -> None:
    """In a fresh process with blocking sync requested: a thread waiting ~0.3 s for a
    wait_event uses little CPU; for a plain event it spins (the CPU share of the whole wait)."""
    code = (
        "import time, torch\n"
        "from ttball.cudasched import request_blocking_sync, wait_event\n"
        "assert request_blocking_sync() is None\n"
        "torch.ones(1, device='cuda'); torch.cuda.synchronize()\n"
        "cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1e3 * 0.3)\n"
        "for name, event in (('sleep', wait_event()), ('plain', torch.cuda.Event())):\n"
        "    torch.cuda._sleep(cycles); event.record()\n"
        "    wall, cpu = time.perf_counter(), time.thread_time()\n"
        "    event.synchronize()\n"
        "    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu\n"
        "    print(name, round(wall, 3), round(cpu / wall, 3))\n")
    out = _in_a_fresh_process(code)
    assert out.returncode == 0, out.stderr[-2000:]
    shares = {name: (float(wall), float(share))
              for name, wall, share in (line.split() for line in out.stdout.splitlines())}
    assert shares["sleep"][0] > 0.1 and shares["plain"][0] > 0.1, shares  # a real wait
    assert shares["sleep"][1] < 0.2 and shares["plain"][1] > 0.5, shares


class _Nvml:
    """libnvidia-ml's three calls ``driver_version`` makes, answering ``rc`` and ``text``."""

    def __init__(self, init: int = 0, rc: int = 0, text: bytes = b"580.95.05") -> None:
        self.init, self.rc, self.text, self.calls = init, rc, text, []

    def nvmlInit_v2(self) -> int:
        self.calls.append("init")
        return self.init

    def nvmlSystemGetDriverVersion(self, buf, size) -> int:
        assert size.value == len(buf)
        buf.value = self.text
        return self.rc

    def nvmlShutdown(self) -> int:
        self.calls.append("shutdown")
        return 0


class _Cuda:
    def __init__(self, rc: int = 0, version: int = 13000) -> None:
        self.rc, self.version = rc, version

    def cuDriverGetVersion(self, ref) -> int:
        ref._obj.value = self.version
        return self.rc


def test_the_driver_version_comes_from_nvml_else_from_the_cuda_driver() -> None:
    nvml = _Nvml()
    assert driver_version(nvml, _Cuda()) == "580.95.05"
    assert nvml.calls == ["init", "shutdown"]
    assert driver_version(_Nvml(init=9), _Cuda(version=12080)) == "cuda 12.8"
    assert driver_version(_Nvml(rc=3), _Cuda()) == "cuda 13.0"
    assert driver_version(_Nvml(init=9), _Cuda(rc=100)) is None

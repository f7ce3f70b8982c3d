"""How this process's host threads wait for the GPU: spin (CUDA's default on a host with more
cores than CUDA contexts) or sleep until the GPU is done (``CU_CTX_SCHED_BLOCKING_SYNC``).

A thread that spins on a ``cudaStreamSynchronize``, an event or a device-to-host copy holds a
core for the whole wait. One process does not notice; four replicas of two lanes on one host,
each lane waiting on the GPU at every push, may take cores from their own event loops
(``serve --cuda-blocking-sync``, docs/ray.md). The flag belongs to the device's primary
context, so it must be set before anything in the process creates that context (PyTorch's
first CUDA call): :func:`request_blocking_sync` says why it could not, rather than raise.

Through the CUDA driver API (``libcuda.so.1``, loaded with ctypes), which every CUDA runtime
in the process shares; nothing here initializes PyTorch's CUDA state. Also the driver's version
(:func:`driver_version`, NVML's or the driver API's), for tuning records and benchmark reports.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

CU_CTX_SCHED_MASK = 0x07
SCHED_NAMES = {0x00: "auto", 0x01: "spin", 0x02: "yield", 0x04: "blocking_sync"}
CU_CTX_SCHED_BLOCKING_SYNC = 0x04


@functools.cache
def _library(name: str) -> Any | None:
    """The shared library ``name`` loaded with ctypes, once; None where it is not installed."""
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def _driver() -> Any | None:
    return _library("libcuda.so.1")


def _devices(driver: Any) -> list[int] | str:
    """The visible devices' handles, or why there are none."""
    if (rc := driver.cuInit(0)) != 0:
        return f"cuInit failed (CUresult {rc})"
    count = ctypes.c_int(0)
    if (rc := driver.cuDeviceGetCount(ctypes.byref(count))) != 0 or count.value == 0:
        return f"no CUDA device (CUresult {rc})"
    handles = []
    for index in range(count.value):
        dev = ctypes.c_int(0)
        if (rc := driver.cuDeviceGet(ctypes.byref(dev), index)) != 0:
            return f"cuDeviceGet({index}) failed (CUresult {rc})"
        handles.append(dev.value)
    return handles


def _state(driver: Any, dev: int) -> tuple[int, bool] | int:
    """Device handle ``dev``'s primary context: its flags and whether it is active, or the
    driver's error code."""
    flags, active = ctypes.c_uint(0), ctypes.c_int(0)
    if (rc := driver.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags),
                                                ctypes.byref(active))) != 0:
        return int(rc)
    return flags.value, bool(active.value)


def primary_context(index: int = 0, driver: Any | None = None) -> tuple[str, bool] | None:
    """Device ``index``'s primary context: its scheduling mode (one of :data:`SCHED_NAMES`'
    values) and whether it is active. None without a CUDA driver or device."""
    driver = driver if driver is not None else _driver()
    if driver is None:
        return None
    devices = _devices(driver)
    if isinstance(devices, str) or index >= len(devices):
        return None
    state = _state(driver, devices[index])
    if isinstance(state, int):
        return None
    mode = state[0] & CU_CTX_SCHED_MASK
    return SCHED_NAMES.get(mode, hex(mode)), state[1]


def request_blocking_sync(driver: Any | None = None) -> str | None:
    """Ask every visible device's primary context to put waiting host threads to sleep. Returns
    None when set, else why not (no driver, no device, a context already active: call this
    before the process's first CUDA work)."""
    driver = driver if driver is not None else _driver()
    if driver is None:
        return "no CUDA driver (libcuda.so.1)"
    devices = _devices(driver)
    if isinstance(devices, str):
        return devices
    for index, dev in enumerate(devices):
        state = _state(driver, dev)
        if isinstance(state, int):
            return f"cuDevicePrimaryCtxGetState({index}) failed (CUresult {state})"
        flags, active = state
        if (flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC:
            continue
        if active:
            return f"device {index}'s CUDA context is already active: set it before any CUDA work"
        new = (flags & ~CU_CTX_SCHED_MASK) | CU_CTX_SCHED_BLOCKING_SYNC
        set_flags = (getattr(driver, "cuDevicePrimaryCtxSetFlags_v2", None)
                     or driver.cuDevicePrimaryCtxSetFlags)
        if (rc := set_flags(dev, new)) != 0:
            return f"cuDevicePrimaryCtxSetFlags({index}) failed (CUresult {rc})"
    return None


@functools.cache
def waits_sleep(index: int = 0) -> bool:
    """Whether device ``index``'s primary context puts waiting threads to sleep (set by
    :func:`request_blocking_sync`). Cached: the flag cannot change once the context exists."""
    state = primary_context(index)
    return state is not None and state[0] == "blocking_sync"


def wait_event(enable_timing: bool = False, index: int = 0) -> Any:
    """A ``torch.cuda.Event`` for a host thread to wait on. In a process whose context sleeps
    while waiting (``serve --cuda-blocking-sync``) it is made with ``cudaEventBlockingSync``:
    without it ``cudaEventSynchronize`` spins whatever the context's flag says (measured: a
    lane's wait for its statistics 76 % on the CPU with the flag set, docs/benchmarks/LOG.md,
    thirty-seventh session)."""
    import torch

    return torch.cuda.Event(enable_timing=enable_timing, blocking=waits_sleep(index))


@functools.cache  # once a process (per pair of libraries): it does not change under it
def driver_version(nvml: Any | None = None, cuda: Any | None = None) -> str | None:
    """The GPU driver's version: NVML's full one (``580.95.05``: a driver update can change
    which configuration is fastest), else the CUDA driver API's (``cuda 13.0``), else None.
    ``nvml``, ``cuda``: the loaded libraries (default ``libnvidia-ml.so.1``, ``libcuda.so.1``)."""
    nvml = nvml if nvml is not None else _library("libnvidia-ml.so.1")
    if nvml is not None and nvml.nvmlInit_v2() == 0:
        text = ctypes.create_string_buffer(96)
        rc = nvml.nvmlSystemGetDriverVersion(text, ctypes.c_uint(len(text)))
        nvml.nvmlShutdown()
        if rc == 0 and text.value:
            return text.value.decode(errors="replace")
    cuda = cuda if cuda is not None else _driver()
    version = ctypes.c_int(0)
    if cuda is not None and cuda.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value:
        return f"cuda {version.value // 1000}.{version.value % 1000 // 10}"
    return None

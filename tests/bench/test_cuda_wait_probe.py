"""scripts/cuda_wait_probe.c and scripts/gpu_decode_waits.py, on the CPU: the probe counts and
times a driver function handed out by ``cuGetProcAddress`` (as the CUDA runtime finds them) or
looked up by name, here those of a fake driver library."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.script_env import ROOT, load_script

FAKE_DRIVER = r"""
#include <string.h>
#include <time.h>
static void pause_ms(long ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, 0);
}
int cuMemFreeHost(void *p) { pause_ms(3); return 0; }
int cuMemcpyHtoD_v2(unsigned long dst, const void *src, unsigned long n) { return 0; }
int cuMemcpyHtoD_v2_ptds(unsigned long dst, const void *src, unsigned long n) { return 0; }
int cuMemFree_v2(unsigned long p) { pause_ms(1); return 0; }
int cuLaunchKernel(void) { return 0; }
int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                        void *status) {
    if (strcmp(symbol, "cuMemFreeHost") == 0) *pfn = (void *)cuMemFreeHost;
    else if (strcmp(symbol, "cuGetProcAddress") == 0) *pfn = (void *)cuGetProcAddress_v2;
    else if (strcmp(symbol, "cuLaunchKernel") == 0) *pfn = (void *)cuLaunchKernel;
    else if (strcmp(symbol, "cuMemcpyHtoD") == 0)  /* flags 1: per-thread default stream */
        *pfn = flags ? (void *)cuMemcpyHtoD_v2_ptds : (void *)cuMemcpyHtoD_v2;
    else return 500;
    return 0;
}
"""

# what the runtime does: dlopen the driver, dlsym cuGetProcAddress on its handle, ask it
CALLER = r"""
import ctypes, json, sys
driver = ctypes.CDLL(sys.argv[1])
probe = ctypes.CDLL(sys.argv[2])
get = driver.cuGetProcAddress_v2
get.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                ctypes.c_ulonglong, ctypes.c_void_p]
# the runtime may ask the driver for cuGetProcAddress itself and look up through that
itself = ctypes.c_void_p()
assert get(b"cuGetProcAddress", ctypes.byref(itself), 13000, 0, None) == 0
get = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                       ctypes.c_int, ctypes.c_ulonglong, ctypes.c_void_p)(itself.value)
free_host = ctypes.c_void_p()
launch = ctypes.c_void_p()
assert get(b"cuMemFreeHost", ctypes.byref(free_host), 13000, 0, None) == 0
assert get(b"cuLaunchKernel", ctypes.byref(launch), 13000, 0, None) == 0
copies = []
for flags in (0, 1):  # the legacy and the per-thread default stream's: two pointers, one name
    copy = ctypes.c_void_p()
    assert get(b"cuMemcpyHtoD", ctypes.byref(copy), 13000, flags, None) == 0
    copies.append(ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p,
                                   ctypes.c_ulong)(copy.value))
probe.probe_reset()
for copy in copies:
    assert copy(0, None, 0) == 0
call = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
assert call(free_host.value)(None) == 0
assert call(free_host.value)(None) == 0
assert ctypes.CFUNCTYPE(ctypes.c_int)(launch.value)() == 0
assert driver.cuMemFree_v2(ctypes.c_ulong(0)) == 0  # looked up by name
probe.probe_name.restype = ctypes.c_char_p
n = probe.probe_count()
calls, seconds = (ctypes.c_long * n)(), (ctypes.c_double * n)()
probe.probe_read(calls, seconds)
print(json.dumps({probe.probe_name(i).decode(): [calls[i], seconds[i]]
                  for i in range(n) if calls[i]}))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    compiler = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if compiler is None:
        pytest.skip("no C compiler")
    folder = tmp_path_factory.mktemp("probe")
    (folder / "fake.c").write_text(FAKE_DRIVER)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(folder / "libfakecuda.so"),
                    str(folder / "fake.c")], check=True)
    probe = load_script("gpu_decode_waits").build_probe(folder / "probe.so")
    return folder / "libfakecuda.so", probe


def test_the_probe_counts_and_times_what_the_driver_hands_out(built: tuple[Path, Path]) -> None:
    driver, probe = built
    done = subprocess.run([sys.executable, "-c", CALLER, str(driver), str(probe)],
                          env={"LD_PRELOAD": str(probe), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=True)
    counts = json.loads(done.stdout)
    # cuLaunchKernel is not among the probe's functions: handed out as it is, not counted
    assert set(counts) == {"cuMemFreeHost", "cuMemFree", "cuMemcpyHtoD"}
    assert counts["cuMemcpyHtoD"][0] == 2  # both pointers it came as
    assert counts["cuMemFreeHost"][0] == 2 and counts["cuMemFreeHost"][1] >= 0.006
    assert counts["cuMemFree"][0] == 1 and counts["cuMemFree"][1] >= 0.001


def test_the_script_needs_a_gpu(built: tuple[Path, Path]) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the CPU-only refusal")
    _, probe = built
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_decode_waits.py"),
                           "--probe", str(probe)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, check=False)
    assert done.returncode != 0
    assert done.stderr.strip() == "gpu_decode_waits.py: needs a CUDA GPU"

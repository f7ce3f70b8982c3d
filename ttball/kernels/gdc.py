"""Programmatic dependent launch (PDL) for the plan's kernels: Hopper (sm_90) and later.

In a chain of kernels on one stream, a kernel launched with ``launch_pdl=True`` may start
before the previous one has finished: its programs get scheduled, run what comes before
:func:`grid_wait` (index arithmetic, and in the tail kernel its SE weights), and block there
until the previous kernel has completed and its writes are visible. The previous kernel lets
its dependents launch by calling :func:`grid_launch_dependents` (here right after its own wait).
What it hides per kernel boundary is the launch and scheduling of the next grid and its
prologue, not any of the previous kernel's work.

Rules that keep it correct, which every kernel of the plan follows:

- nothing before :func:`grid_wait` writes memory or reads an activation or the SE sums
  (a buffer may still be written, or read and then overwritten, by the previous kernel);
- every program of every kernel calls :func:`grid_wait`, unconditionally, so a kernel never
  completes before its predecessor: the kernel after next can rely on both being done.

Triton's interpreter has neither instruction (and runs kernels one after another anyway): there
both are no-ops, so the CPU tests run the same kernel code.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl  # noqa: F401  (the interpreter wants it among a jit function's globals)

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # Triton before 3.3
    gdc_wait = gdc_launch_dependents = None


def _launch_option() -> bool:
    """Whether this Triton's CUDA launcher takes ``launch_pdl``."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return False
    return "launch_pdl" in getattr(CUDAOptions, "__dataclass_fields__", {})


if INTERPRETED or gdc_wait is None:

    @triton.jit
    def grid_wait():
        pass

    @triton.jit
    def grid_launch_dependents():
        pass

else:
    grid_wait = gdc_wait
    grid_launch_dependents = gdc_launch_dependents


def pdl_missing(device: torch.device) -> str | None:
    """Why the kernels can't use programmatic dependent launch on ``device`` (None: they can)."""
    if gdc_wait is None or not _launch_option():
        return f"Triton {triton.__version__} has no programmatic dependent launch (3.3 or later)"
    if device.type != "cuda":
        return "needs a CUDA device"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 9:
        return f"needs compute capability 9.0 or later (Hopper), this GPU has {major}.{minor}"
    return None

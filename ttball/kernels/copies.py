"""Device-to-device copies on the SMs instead of the copy engines (issue 9, the worker's path).

``Tensor.clone`` and ``Tensor.copy_`` of contiguous tensors on one CUDA device are a
``cudaMemcpyAsync``, which the driver may run on a copy engine; the copy engines are shared by
every process on the GPU (``serve --ray``'s replicas and their decode children as MPS clients),
so a lane's copy may wait behind another process's. With ``TTBALL_KERNEL_COPIES=1`` in the
environment, the worker's large device copies -- a decode child's frames out of its shared
slot, a CUDA-graph backend's batch into its static input and its output out of it, the
pipeline's private copy of the logits -- run as an element-wise kernel instead (``x * 1`` for
floating point, ``x + 0`` for integers: the same bits, NaN aside). Off by default: which is
faster is measured (``scripts/gpu_copy_contention.py``, ``docs/benchmarks/e2e.md``).
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

ENV = "TTBALL_KERNEL_COPIES"

__all__ = ["ENV", "clone", "copy_into", "kernel_copies"]


def kernel_copies() -> bool:
    """Whether the environment asks for kernel copies (read on each call: cheap, and a test or
    a child process can set it)."""
    return os.environ.get(ENV, "") == "1"


def copy_into(dst: Tensor, src: Tensor, kernel: bool | None = None) -> Tensor:
    """``dst.copy_(src)``, as an element-wise kernel when ``kernel`` (default: on CUDA when
    :func:`kernel_copies`) and both are on one device with the same dtype and shape (bool
    tensors always copy). Returns ``dst``."""
    use = (kernel_copies() and src.is_cuda) if kernel is None else kernel
    if not (use and dst.device == src.device and dst.dtype == src.dtype
            and dst.shape == src.shape and src.dtype != torch.bool):
        return dst.copy_(src)
    if src.dtype.is_floating_point or src.dtype.is_complex:
        return torch.mul(src, 1, out=dst)
    return torch.add(src, 0, out=dst)


def clone(src: Tensor, kernel: bool | None = None) -> Tensor:
    """A contiguous copy of ``src`` (``Tensor.clone``; see :func:`copy_into`)."""
    return copy_into(torch.empty_like(src, memory_format=torch.contiguous_format), src, kernel)

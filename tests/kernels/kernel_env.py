"""Where the kernel tests run their Triton kernels: compiled on a CUDA GPU, else in Triton's
interpreter on CPU.

Triton decides compiled vs interpreted when a function is decorated (its own ``tl.zeros`` /
``tl.sum`` included), from ``TRITON_INTERPRET``: so ``tests/conftest.py`` sets it without a
GPU, before any test module is collected (``torch.compile`` imports triton when it runs). If
triton was imported compiled on a machine without a GPU anyway, the kernel tests skip and say
so.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")


def require_triton() -> None:
    """Skip the calling test module unless its kernels can run here."""
    pytest.importorskip("triton", reason="triton is not installed (the dev extra installs it)")
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    if not CUDA and isinstance(tl.zeros, JITFunction):
        pytest.skip(
            "no GPU, and triton was imported before TRITON_INTERPRET=1 was set; run "
            "`pytest tests/kernels` in a process of its own",
            allow_module_level=True,
        )


def graph_replay_rel(candidate: Any, plain: Any, x: torch.Tensor) -> float:
    """Relative difference of ``candidate``'s logits from ``plain``'s (both backends) on ``x``,
    after three calls of the candidate: the first compiles, the second captures its CUDA
    graph, the third replays it."""
    want = plain(x).float().clone()
    for _ in range(3):
        got = candidate(x).float()
    return ((got - want).norm() / want.norm()).item()

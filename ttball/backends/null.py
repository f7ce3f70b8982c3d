"""``null``: no network. Every call returns the same constant logits (no ball anywhere), so a
worker that runs it does everything but the network's GPU work: decode, resize, windows,
post-processing, tracking, the server.

A diagnostic, not a way to run BlurBall: its rows find nothing, ``ttball verify`` fails it (that
is the point of the gate), ``--backend auto`` never offers it, and ``ttball bench`` runs it only
when named. What it measures is a ceiling: how many frames a second the rest of the path serves
on a machine, against which the path with the real network is read (``docs/benchmarks/e2e.md``;
``scripts/gpu_ray_loadtest.sh`` with ``BACKEND=null``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ttball.backends.base import BackendBase, register

#: The constant logit: sigmoid(-20) ~ 2e-9, far below any detection threshold.
NULL_LOGIT = -20.0


class NullBackend(BackendBase):
    """``(B, 9, H, W)`` → ``(B, 3, H, W)`` float32, every value :data:`NULL_LOGIT`.

    One buffer per input shape, filled once: a call launches no GPU work (the buffer is the
    same for every call, and nothing ever writes into it, so a caller may hold an earlier
    result)."""

    name = "null"

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        super().__init__(device)
        self._out: dict[tuple[int, ...], Tensor] = {}

    def run(self, batch: Tensor) -> Tensor:
        b, _, h, w = batch.shape
        key = (b, h, w)
        out = self._out.get(key)
        if out is None:
            out = torch.full((b, 3, h, w), NULL_LOGIT, dtype=torch.float32, device=self.device)
            self._out[key] = out
        return out


@register(
    "null",
    description="diagnostic: no network, constant logits (no ball); the rest of the path's ceiling",
    tags=("diagnostic", "fp32"),
)
def _null(model: torch.nn.Module, device: torch.device) -> NullBackend:
    return NullBackend(model, device)

"""PyTorch eager execution of the network: the reference every other backend is checked against."""

from __future__ import annotations

import torch
from torch import Tensor

from ttball.backends.base import BackendBase, register


class EagerBackend(BackendBase):
    """Runs ``model`` as it is, in FP32, on ``device``."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        super().__init__(device)
        self.model = model.to(device).eval()

    def run(self, batch: Tensor) -> Tensor:
        return self.model(batch.float())[0]


@register("eager-fp32", description="PyTorch eager, FP32 (the reference)", tags=("reference",))
def _eager_fp32(model: torch.nn.Module, device: torch.device) -> EagerBackend:
    return EagerBackend(model, device)

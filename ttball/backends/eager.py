"""PyTorch eager execution of the network: the reference every other backend is checked against,
and its precision / layout / cuDNN variants (``eager-fp16``, ``eager-fp16-autocast``,
``eager-fp32-cl``, ``eager-fp32-cudnnbench``, ...).

FP16 and BF16 run on CPU too with torch 2.13 (checked on a Xeon with AVX-512 FP16/AMX: both
weights and autocast variants agree with FP32 to < 1e-2 relative), so only the
``cudnn.benchmark`` variants need a GPU: the flag means nothing without cuDNN.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ttball.backends._recipe import (
    Recipe,
    autocast_context,
    cudnn_benchmark,
    prepare_input,
    prepare_model,
    register_recipes,
)
from ttball.backends.base import BackendBase, register


class EagerBackend(BackendBase):
    """Runs ``model`` eagerly on ``device`` as ``recipe`` says (default: FP32, the reference).

    The timed call covers the input cast/layout change and the FP32 output conversion.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        recipe: Recipe | None = None,
        **options: Any,
    ) -> None:
        super().__init__(device)
        recipe = Recipe.from_options(options, "eager", recipe=recipe)
        self.recipe = recipe
        self.precision = recipe.precision
        self.model = prepare_model(model, device, recipe)

    def run(self, batch: Tensor) -> Tensor:
        with (
            cudnn_benchmark(self.recipe.cudnn_benchmark),
            autocast_context(self.recipe, self.device),
        ):
            return self.model(prepare_input(batch, self.recipe))[0]


@register(
    "eager-fp32", description="PyTorch eager, FP32 (the reference)", tags=("reference", "fp32")
)
def _eager_fp32(model: torch.nn.Module, device: torch.device) -> EagerBackend:
    return EagerBackend(model, device)


register_recipes(
    "eager",
    EagerBackend,
    [
        Recipe("fp16"),
        Recipe("bf16"),
        Recipe("fp16", autocast=True),
        Recipe("bf16", autocast=True),
        Recipe("fp32", channels_last=True),
        Recipe("fp16", channels_last=True),
        Recipe("bf16", channels_last=True),
        Recipe("fp16", autocast=True, channels_last=True),
        Recipe("fp32", cudnn_benchmark=True),
        Recipe("fp16", cudnn_benchmark=True),
        Recipe("fp16", autocast=True, cudnn_benchmark=True),
    ],
    "PyTorch eager",
)

"""Eager execution of the network with every BatchNorm folded into its convolution
(:func:`ttball.passes.fold_batchnorm`): 71 fewer launches per call, same function."""

from __future__ import annotations

from ttball.backends._recipe import Recipe, register_recipes
from ttball.backends.eager import EagerBackend

register_recipes(
    "folded",
    EagerBackend,
    [
        Recipe("fp32", fold=True),
        Recipe("fp16", fold=True),
        Recipe("bf16", fold=True),
        Recipe("fp32", fold=True, channels_last=True),
        Recipe("fp16", fold=True, channels_last=True),
    ],
    "PyTorch eager, BN folded into the convolutions",
    omit=("folded",),
)

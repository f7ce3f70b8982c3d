"""Fold every BatchNorm into the convolution before it (inference only).

A :mod:`torch.fx` pass: the network is traced, and each ``BatchNorm2d`` node whose input is a
``Conv2d`` node used by nothing else is removed after its affine transform is folded into that
convolution's weight and bias. On BlurBall this removes all 71 BatchNorms (72 convolutions; the
head has none). The folded weights are computed in float64 and cast back, so the folded network
matches the original to float32 rounding (``tests/backends/test_fold_bn.py``: < 1e-5 relative).
"""

from __future__ import annotations

import copy
from typing import cast

import torch
from torch import fx, nn


@torch.no_grad()
def fold_conv_bn(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> nn.Conv2d:
    """A new convolution computing ``bn(conv(x))`` with BN's running statistics (eval mode)."""
    if bn.training or bn.running_mean is None or bn.running_var is None:
        raise ValueError("folding needs a BatchNorm in eval mode with running statistics")
    w = conv.weight.double()
    b = conv.bias.double() if conv.bias is not None else torch.zeros_like(bn.running_mean).double()
    gamma = bn.weight.double() if bn.weight is not None else torch.ones_like(b)
    beta = bn.bias.double() if bn.bias is not None else torch.zeros_like(b)
    scale = gamma / torch.sqrt(bn.running_var.double() + bn.eps)
    fused = copy.deepcopy(conv)
    fused.weight = nn.Parameter((w * scale.reshape(-1, 1, 1, 1)).to(conv.weight.dtype))
    fused.bias = nn.Parameter(((b - bn.running_mean.double()) * scale + beta).to(conv.weight.dtype))
    return fused


def _foldable(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    if node.op != "call_module" or not isinstance(modules[str(node.target)], nn.BatchNorm2d):
        return False
    src = node.args[0]
    return (
        isinstance(src, fx.Node)
        and src.op == "call_module"
        and isinstance(modules[str(src.target)], nn.Conv2d)
        and len(src.users) == 1
    )


def _replace_submodule(root: nn.Module, qualname: str, new: nn.Module) -> None:
    parent, _, leaf = qualname.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, leaf, new)


def fold_batchnorm(model: nn.Module) -> tuple[fx.GraphModule, int]:
    """Trace ``model`` and fold each conv→BN pair. Returns (new eval-mode model, pairs folded).

    ``model`` is left untouched. The result computes the same function in eval mode only (it
    uses BN's running statistics), keeps ``model.config`` if there is one, and has the same
    input/output contract: ``(B, 9, H, W) -> {0: logits (B, 3, H, W)}`` for BlurBall.
    """
    gm = fx.symbolic_trace(copy.deepcopy(model).eval())
    modules = dict(gm.named_modules())
    folded = 0
    for node in list(gm.graph.nodes):
        if not _foldable(node, modules):
            continue
        conv_node = cast(fx.Node, node.args[0])  # checked by _foldable
        fused = fold_conv_bn(modules[conv_node.target], modules[node.target])
        _replace_submodule(gm, str(conv_node.target), fused)
        node.replace_all_uses_with(conv_node)
        gm.graph.erase_node(node)
        folded += 1
    gm.graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    if hasattr(model, "config"):
        gm.config = model.config
    return gm.eval(), folded

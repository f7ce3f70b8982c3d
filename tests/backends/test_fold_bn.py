"""The BN-folding pass: all 71 BatchNorms go, the function stays (eval mode)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ttball.model import BlurBall, randomize_batchnorm
from ttball.passes import fold_batchnorm
from ttball.passes.fold_bn import fold_conv_bn

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def _count(model: nn.Module, kind: type[nn.Module]) -> int:
    return sum(isinstance(m, kind) for m in model.modules())


def test_fold_removes_every_batchnorm_and_keeps_the_output() -> None:
    torch.manual_seed(0)
    model = randomize_batchnorm(BlurBall()).eval()
    folded, count = fold_batchnorm(model)
    assert count == 71
    assert _count(folded, nn.BatchNorm2d) == 0
    assert _count(folded, nn.Conv2d) == 72
    assert _count(model, nn.BatchNorm2d) == 71, "the input model must be left untouched"
    x = torch.randn(2, 9, 72, 128)
    with torch.inference_mode():
        ref, out = model(x)[0], folded(x)[0]
    rel = ((out - ref).norm() / ref.norm()).item()
    assert rel < 1e-5, f"folded output differs by {rel:.2e} relative"


def test_fold_keeps_the_weights_config() -> None:
    model = BlurBall().eval()
    folded, _ = fold_batchnorm(model)
    assert folded.config == model.config


def test_fold_conv_with_bias_and_affine_bn() -> None:
    torch.manual_seed(1)
    conv = nn.Conv2d(4, 6, 3, padding=1, bias=True)
    bn = randomize_batchnorm(nn.Sequential(nn.BatchNorm2d(6)), seed=3)[0].eval()
    x = torch.randn(1, 4, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(fold_conv_bn(conv, bn)(x), bn(conv(x)), rtol=1e-5, atol=1e-6)

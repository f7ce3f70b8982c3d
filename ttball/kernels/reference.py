"""A plain-PyTorch executor of a :class:`~ttball.kernels.plan.Plan`: the specification the
Triton kernels are tested against.

Same buffers (NHWC), same step decomposition, any device and dtype (the tests run it on CPU in
float32 and compare it with the BlurBall module). Convolutions go through ``F.conv2d`` on NCHW
views; an upsampled 1×1 term is convolved at its source's resolution and repeated, which equals
the kernels' read at ``(h >> up, w >> up)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ttball.kernels.plan import INPUT, OUTPUT, Conv, Plan, SqueezeTail, Term


def upsample(x: Tensor, up: int) -> Tensor:
    """Nearest-neighbour ×2**up of an NHWC tensor."""
    if up == 0:
        return x
    return x.repeat_interleave(2**up, dim=1).repeat_interleave(2**up, dim=2)


def apply_term(term: Term, src: Tensor) -> Tensor:
    """``term`` on NHWC ``src``; NHWC result at the step's output resolution (no bias)."""
    w = term.weight.to(src.dtype)
    out = F.conv2d(src.permute(0, 3, 1, 2), w, stride=term.stride, padding=term.ksize // 2)
    return upsample(out.permute(0, 2, 3, 1), term.up)


def se_scale(step: SqueezeTail, se_sum: Tensor, pixels: int) -> Tensor:
    """``(B, C)`` sigmoid gates from the ``(B, C)`` float32 sums of ``y`` over its pixels."""
    mean = se_sum / pixels
    hidden = torch.relu(mean @ step.fc1.to(mean).T)
    return torch.sigmoid(hidden @ step.fc2.to(mean).T)


def run_conv(step: Conv, bufs: dict[str, Tensor], sums: dict[str, Tensor]) -> None:
    acc = sum(apply_term(t, bufs[t.src]) for t in step.terms)
    acc = acc + step.bias.to(acc)
    for name, up in step.addends:
        acc = acc + upsample(bufs[name], up)
    if step.se_sum:
        sums[step.se_sum] = acc.float().sum(dim=(1, 2))
    bufs[step.out] = torch.relu(acc) if step.relu else acc


def run_tail(step: SqueezeTail, bufs: dict[str, Tensor], sums: dict[str, Tensor]) -> None:
    y = bufs[step.y]
    scale = se_scale(step, sums[step.se_sum], y.shape[1] * y.shape[2]).to(y.dtype)
    t = torch.relu(y * scale[:, None, None, :] + bufs[step.residual])
    if step.out:
        bufs[step.out] = t
    if step.proj:
        bufs[step.proj.out] = t @ step.proj.weight.to(t).T + step.proj.bias.to(t)
    if not step.terms:
        return
    assert step.bias is not None
    f = t + sum(apply_term(term, bufs[term.src]) for term in step.terms) + step.bias.to(t)
    f = torch.relu(f)
    if step.fused:
        bufs[step.fused] = f
    if step.head:
        bufs[step.head.out] = f @ step.head.weight.to(f).T + step.head.bias.to(f)


@torch.inference_mode()
def run_reference(plan: Plan, batch: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """``batch (B, 9, H, W)`` → logits ``(B, 3, H, W)`` float32, every step in ``dtype``
    (default: the batch's)."""
    dtype = dtype or batch.dtype
    bufs = {INPUT: batch.to(dtype).permute(0, 2, 3, 1)}
    sums: dict[str, Tensor] = {}
    for step in plan.steps:
        if isinstance(step, Conv):
            run_conv(step, bufs, sums)
        else:
            run_tail(step, bufs, sums)
    return bufs[OUTPUT].permute(0, 3, 1, 2).float()

"""The BasicBlock tail kernel (SE gates, scale, residual, ReLU; fuse output; head) against the
reference executor's ``run_tail`` on tiny shapes."""

from __future__ import annotations

import pytest
import torch
from kernel_env import DEVICE, require_triton
from torch import Tensor

from ttball.kernels.plan import Head, SqueezeTail, Term
from ttball.kernels.reference import run_tail

require_triton()
pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def device() -> torch.device:
    return DEVICE


B, H, W = 2, 16, 24
GEN = torch.Generator().manual_seed(0)


def fp16_exact(*shape: int, scale: float = 1.0) -> Tensor:
    return (scale * torch.randn(*shape, generator=GEN)).half().float()


def nhwc(channels: int, level: int) -> Tensor:
    return fp16_exact(B, H >> level, W >> level, channels)


def se_tail(c: int, **fuse: object) -> SqueezeTail:
    hid = max(c // 16, 1)
    return SqueezeTail("y", "r", "s", fp16_exact(hid, c, scale=c**-0.5),
                       fp16_exact(c, hid), **fuse)  # type: ignore[arg-type]


def run_both(step: SqueezeTail, bufs: dict[str, Tensor], device: torch.device,
             block_m: int) -> None:
    from ttball.kernels.configs import Config
    from ttball.kernels.launches import TailLaunch

    c = step.channels
    sums = {"s": bufs["y"].sum(dim=(1, 2))}
    ref_bufs = dict(bufs)
    run_tail(step, ref_bufs, sums)
    dev_bufs = {k: v.to(device, torch.float16).contiguous() for k, v in bufs.items()}
    outs = [n for n in (step.out, step.fused) if n]
    for name in outs:
        dev_bufs[name] = torch.empty(B, H, W, c, device=device, dtype=torch.float16)
    if step.proj:
        n = step.proj.weight.shape[0]
        dev_bufs[step.proj.out] = torch.empty(B, H, W, n, device=device, dtype=torch.float16)
        outs.append(step.proj.out)
    logits = None
    if step.head:
        logits = torch.empty(B, step.head.weight.shape[0], H, W, device=device)
        dev_bufs[step.head.out] = logits.permute(0, 2, 3, 1)
        outs.append(step.head.out)
    TailLaunch(step, device)(dev_bufs, {"s": sums["s"].to(device)}, Config(block_m, 4, 1))
    for name in outs:
        torch.testing.assert_close(dev_bufs[name].float().cpu(), ref_bufs[name],
                                   rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("channels", [16, 128])
def test_scale_residual_relu(device: torch.device, channels: int) -> None:
    step = se_tail(channels, out="t")
    run_both(step, {"y": nhwc(channels, 0), "r": nhwc(channels, 0)}, device, 64)


def _fuse_terms() -> tuple[Term, ...]:
    return tuple(Term(src, fp16_exact(16, cin, 1, 1, scale=cin**-0.5), 1, up)
                 for src, cin, up in (("x1", 32, 1), ("x2", 64, 2), ("x3", 128, 3)))


def _fuse_bufs() -> dict[str, Tensor]:
    return {"y": nhwc(16, 0), "r": nhwc(16, 0), "x1": nhwc(32, 1), "x2": nhwc(64, 2),
            "x3": nhwc(128, 3)}


def test_fuse_output_keeps_the_block_output(device: torch.device) -> None:
    """Branch 0's last block in stages 2-3: stores t and relu(t + bias + coarser 1×1 terms)."""
    step = se_tail(16, out="t", terms=_fuse_terms()[:2], bias=fp16_exact(16), fused="f")
    run_both(step, _fuse_bufs(), device, 128)


def test_fuse_output_into_the_head(device: torch.device) -> None:
    """Stage 4: t not stored, three coarser terms, the 1×1 head written as float32 NCHW."""
    head = Head("logits", fp16_exact(3, 16, scale=0.25), fp16_exact(3))
    step = se_tail(16, terms=_fuse_terms(), bias=fp16_exact(16), head=head)
    run_both(step, _fuse_bufs(), device, 64)


@pytest.mark.parametrize("channels", [32, 128])
def test_projection_of_a_coarse_branch_output(device: torch.device, channels: int) -> None:
    """A coarser branch's last block (``project_terms="tail"``): stores t and its 1×1 map to
    16 channels (FP16, t's resolution), the term branch 0's tail then adds."""
    proj = Head("p", fp16_exact(16, channels, scale=channels**-0.5), torch.zeros(16))
    step = se_tail(channels, out="t", proj=proj)
    run_both(step, {"y": nhwc(channels, 0), "r": nhwc(channels, 0)}, device, 64)

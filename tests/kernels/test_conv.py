"""The conv kernel against the reference executor's ``run_conv``, step kind by step kind, on
tiny shapes (interpreted on CPU, compiled on a GPU). Weights and inputs are FP16-representable,
so the differences are accumulation order and the FP16 rounding of the output."""

from __future__ import annotations

import pytest
import torch
from kernel_env import DEVICE, require_triton
from torch import Tensor

from ttball.kernels.plan import INPUT, Conv, Term
from ttball.kernels.reference import run_conv

require_triton()
pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def device() -> torch.device:
    return DEVICE


B, H, W = 2, 16, 24  # 384 full-resolution pixels: not a multiple of the 256-pixel test tile
GEN = torch.Generator().manual_seed(0)


def fp16_exact(*shape: int, scale: float = 1.0) -> Tensor:
    return (scale * torch.randn(*shape, generator=GEN)).half().float()


def nhwc(channels: int, level: int) -> Tensor:
    return fp16_exact(B, H >> level, W >> level, channels)


def term(src: str, cout: int, cin: int, k: int, stride: int = 1, up: int = 0) -> Term:
    return Term(src, fp16_exact(cout, cin, k, k, scale=(cin * k * k) ** -0.5), stride, up)


def run_both(step: Conv, bufs: dict[str, Tensor], device: torch.device, block_m: int,
             cout_level: int, sums: tuple[str, ...] = ()) -> None:
    from ttball.kernels.configs import Config
    from ttball.kernels.launches import ConvLaunch

    ref_bufs, ref_sums = dict(bufs), {}
    run_conv(step, ref_bufs, ref_sums)
    dev_bufs = {
        k: v.to(device) if k == INPUT else v.to(device, torch.float16).contiguous()
        for k, v in bufs.items()
    }
    dev_bufs[step.out] = torch.empty(B, H >> cout_level, W >> cout_level, step.cout,
                                     device=device, dtype=torch.float16)
    dev_sums = {name: torch.zeros(B, step.cout, device=device) for name in sums}
    ConvLaunch(step, device)(dev_bufs, dev_sums, Config(block_m, 4, 2))
    torch.testing.assert_close(dev_bufs[step.out].float().cpu(), ref_bufs[step.out],
                               rtol=2e-3, atol=2e-3)
    for name in sums:
        torch.testing.assert_close(dev_sums[name].cpu(), ref_sums[name], rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("block_m", [64, 256])
def test_stem_reads_the_float32_nchw_batch(device: torch.device, block_m: int) -> None:
    """3×3, 9 → 64 channels (Cin padded to 16), from the batch in place, + bias, ReLU."""
    batch = fp16_exact(B, 9, H, W)
    step = Conv("y", (term(INPUT, 64, 9, 3),), fp16_exact(64), relu=True)
    run_both(step, {INPUT: batch.permute(0, 2, 3, 1)}, device, block_m, 0)


def test_bottleneck_sums_two_1x1_terms(device: torch.device) -> None:
    step = Conv("y", (term("h", 128, 32, 1), term("x", 128, 64, 1)), fp16_exact(128), relu=True)
    run_both(step, {"h": nhwc(32, 0), "x": nhwc(64, 0)}, device, 64, 0)


def test_stride_two(device: torch.device) -> None:
    step = Conv("y", (term("x", 32, 16, 3, stride=2),), fp16_exact(32), relu=True)
    run_both(step, {"x": nhwc(16, 0)}, device, 32, 1)


def test_squeeze_excitation_sums_per_image(device: torch.device) -> None:
    """conv2 of a BasicBlock: no ReLU, sums of (conv + bias) per image and channel."""
    step = Conv("y", (term("x", 32, 32, 3),), fp16_exact(32), se_sum="s")
    run_both(step, {"x": nhwc(32, 0)}, device, 64, 0, sums=("s",))


def every_term_kind() -> tuple[Conv, dict[str, Tensor]]:
    """A step writing level 1 from a stride-2 3×3 (level 0), a 3×3 (level 1), 1×1 terms read 2×
    and 4× coarser, an addend read 2× coarser, with ReLU and SE sums (every epilogue feature);
    and its input buffers (test_conv_variants.py runs it on tiles)."""
    terms = (
        term("a", 64, 16, 3, stride=2),
        term("b", 64, 32, 3),
        term("c", 64, 64, 1, up=1),
        term("d", 64, 128, 1, up=2),
    )
    step = Conv("y", terms, fp16_exact(64), addends=(("e", 1),), relu=True, se_sum="s")
    bufs = {"a": nhwc(16, 0), "b": nhwc(32, 1), "c": nhwc(64, 2), "d": nhwc(128, 3),
            "e": nhwc(64, 2)}
    return step, bufs


def test_fuse_output_with_four_terms_and_an_upsampled_addend(device: torch.device) -> None:
    step, bufs = every_term_kind()
    run_both(step, bufs, device, 32, 1, sums=("s",))

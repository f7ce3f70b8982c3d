"""The conv kernel's second-version variants (2-D pixel tiles, several taps per K chunk,
L1-cached gathers, im2col for the stem) against the reference executor's ``run_conv`` on tiny
shapes, and the whole plan with a variant for every step (interpreted on CPU, compiled on a
GPU). Same FP16-representable data and tolerances as ``test_conv.py``."""

from __future__ import annotations

import pytest
import torch
from kernel_env import CUDA, DEVICE, require_triton
from test_conv import B, H, W, every_term_kind, fp16_exact, nhwc, term
from torch import Tensor

from ttball.kernels import build_plan, run_reference
from ttball.kernels.plan import INPUT, Conv
from ttball.kernels.reference import run_conv
from ttball.model import BlurBall, randomize_batchnorm

require_triton()
pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def device() -> torch.device:
    return DEVICE


def run_variant(step: Conv, bufs: dict[str, Tensor], device: torch.device, cout_level: int,
                config: object, sums: tuple[str, ...] = ()) -> dict[str, object]:
    """Runs ``step`` with ``config`` and checks it against ``run_conv``; returns the variant
    constexprs the launch used (so a test can assert which code path it exercised)."""
    from ttball.kernels.launches import ConvLaunch

    ref_bufs, ref_sums = dict(bufs), {}
    run_conv(step, ref_bufs, ref_sums)
    dev_bufs = {
        k: v.to(device) if k == INPUT else v.to(device, torch.float16).contiguous()
        for k, v in bufs.items()
    }
    out = torch.full((B, H >> cout_level, W >> cout_level, step.cout), float("nan"),
                     device=device, dtype=torch.float16)  # a pixel left unwritten fails
    dev_bufs[step.out] = out
    dev_sums = {name: torch.zeros(B, step.cout, device=device) for name in sums}
    launch = ConvLaunch(step, device)
    launch(dev_bufs, dev_sums, config)  # type: ignore[arg-type]
    torch.testing.assert_close(out.float().cpu(), ref_bufs[step.out], rtol=2e-3, atol=2e-3)
    for name in sums:
        torch.testing.assert_close(dev_sums[name].cpu(), ref_sums[name], rtol=1e-3, atol=1e-2)
    meta = launch.variant_meta(config, W >> cout_level)  # type: ignore[arg-type]
    return {k: meta.get(k) for k in ("TILE_W", "L1", "IM0", "T0", "BK0", "T1", "BK1", "P0")}


def cfg(block_m: int, tile_w: int = 0, k_chunk: int = 0, l1: bool = True) -> object:
    from ttball.kernels.configs import Config

    return Config(block_m, 4, 2, tile_w=tile_w, k_chunk=k_chunk, l1=l1)


@pytest.mark.parametrize(("block_m", "tile_w", "k_chunk", "taps"), [
    (64, 16, 64, 4),    # 4 × 16 tiles (W = 24: the right tiles half outside), 3 chunks of 4 taps
    (128, 32, 128, 8),  # one 4 × 32 tile per 4 rows, 2 chunks of 8 taps (the second: 1 real)
    (32, 0, 256, 16),   # 1-D runs, all 9 taps in one K = 256 chunk
])
def test_16_channel_taps_per_chunk(device: torch.device, block_m: int, tile_w: int,
                                   k_chunk: int, taps: int) -> None:
    step = Conv("y", (term("x", 16, 16, 3),), fp16_exact(16), relu=True)
    used = run_variant(step, {"x": nhwc(16, 0)}, device, 0, cfg(block_m, tile_w, k_chunk))
    assert (used["T0"], used["BK0"]) == (taps, 16 * taps)


def test_32_channel_with_se_sums_on_2d_tiles(device: torch.device) -> None:
    """SE sums must count each pixel once, none of the masked tile pixels."""
    step = Conv("y", (term("x", 32, 32, 3),), fp16_exact(32), se_sum="s")
    used = run_variant(step, {"x": nhwc(32, 0)}, device, 0, cfg(64, 16, 128), sums=("s",))
    assert (used["TILE_W"], used["T0"], used["BK0"]) == (16, 4, 128)


def test_l1_alone_keeps_one_tap_per_chunk(device: torch.device) -> None:
    step = Conv("y", (term("x", 32, 64, 3),), fp16_exact(32), relu=True)
    used = run_variant(step, {"x": nhwc(64, 0)}, device, 0, cfg(64, 0, 0))
    assert (used["L1"], used["T0"], used["TILE_W"]) == (True, None, None)  # T0: default 1


def test_wide_input_chunks_channels(device: torch.device) -> None:
    """128 → 16 (transition1's shape): K chunks of 64 channels of one tap; 64 → 64 with two
    taps of 64 channels per chunk (5 chunks, the last half masked)."""
    step = Conv("y", (term("x", 16, 128, 3),), fp16_exact(16), relu=True)
    used = run_variant(step, {"x": nhwc(128, 0)}, device, 0, cfg(64, 16, 64))
    assert (used["T0"], used["BK0"]) == (1, 64)
    step = Conv("y", (term("x", 64, 64, 3),), fp16_exact(64), relu=True)
    used = run_variant(step, {"x": nhwc(64, 0)}, device, 0, cfg(64, 16, 128))
    assert (used["T0"], used["BK0"]) == (2, 128)


@pytest.mark.parametrize("k_chunk", [64, 128])
def test_stem_im2col_reads_the_float32_nchw_batch(device: torch.device, k_chunk: int) -> None:
    """9 → 64 from the batch in place with K = (c, kh, kw): 81 columns padded to 128, in one
    or two chunks."""
    batch = fp16_exact(B, 9, H, W)
    step = Conv("y", (term(INPUT, 64, 9, 3),), fp16_exact(64), relu=True)
    used = run_variant(step, {INPUT: batch.permute(0, 2, 3, 1)}, device, 0,
                       cfg(64, 16, k_chunk))
    assert (used["IM0"], used["P0"], used["BK0"]) == (True, 128, k_chunk)


def test_fuse_output_with_every_term_kind_on_tiles(device: torch.device) -> None:
    """Stride-2 3×3 (level 0 → 1), 3×3, upsampled 1×1 terms, an upsampled addend, ReLU, SE
    sums: terms 1-3 through the tap-chunk loop, 1×1 terms with one tap a chunk."""
    step, bufs = every_term_kind()
    used = run_variant(step, bufs, device, 1, cfg(32, 8, 64), sums=("s",))
    assert (used["T0"], used["T1"], used["BK1"]) == (4, 2, 64)


@pytest.mark.parametrize(("block_m", "tile_w", "programs"), [
    (32, 0, 5),   # 12 tiles an image, 24 in all: programs take 5, 5, 5, 5, 4 of both images
    (64, 16, 2),  # 4 × 16 tiles, the right ones half outside
    (32, 0, 64),  # more programs than tiles: one tile each, the grid capped at 24
])
def test_a_fixed_number_of_programs_computes_every_tile_of_every_image(
        device: torch.device, block_m: int, tile_w: int, programs: int) -> None:
    """A grid of ``programs`` looping over tiles, with SE sums (each pixel counted once,
    whichever program and image)."""
    from ttball.kernels.configs import Config

    step = Conv("y", (term("x", 16, 32, 3),), fp16_exact(16), relu=True, se_sum="s")
    config = Config(block_m, 4, 2, tile_w=tile_w, programs=programs)
    run_variant(step, {"x": nhwc(32, 0)}, device, 0, config, sums=("s",))


def test_fixed_programs_with_every_term_kind(device: torch.device) -> None:
    from ttball.kernels.configs import Config

    step, bufs = every_term_kind()
    run_variant(step, bufs, device, 1, Config(32, 4, 2, tile_w=8, k_chunk=64, l1=True,
                                              programs=3), sums=("s",))


def test_whole_plan_with_the_variants(device: torch.device) -> None:
    """Every step of the plan through the variant code paths (one configuration for all, as in
    ``test_executor.py``; on a GPU: each step's tuned choice among old and new candidates)."""
    from ttball.kernels.configs import Config
    from ttball.kernels.executor import TritonExecutor

    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    plan = build_plan(model)
    x = torch.randn(1, 9, 16, 32, generator=torch.Generator().manual_seed(0))
    expected = run_reference(plan, x)
    config = None if CUDA else Config(512, 4, 2, tile_w=32, k_chunk=64, l1=True)
    executor = TritonExecutor(plan, device, config=config)
    out = executor(x.to(device)).cpu()
    rel = ((out - expected).norm() / expected.norm()).item()
    assert rel < 2e-3, f"relative error {rel:.1e} against the FP32 reference"


def tma_cfg(block_m: int, tile_w: int) -> object:
    from ttball.kernels.configs import Config

    return Config(block_m, 4, 3, tile_w=tile_w, tma=True)


@pytest.mark.parametrize(("cin", "cout", "block_m", "tile_w", "sums"), [
    (16, 16, 64, 16, ()),      # 4 × 16 tiles: the right ones half outside the 24-wide image
    (32, 32, 128, 32, ("s",)),  # 4 × 32, wider than the image; SE sums skip masked pixels
    (128, 16, 64, 16, ()),     # transition1's shape: two 64-channel boxes per tap
])
def test_tma_reads_each_tap_as_one_shifted_box(device: torch.device, cin: int, cout: int,
                                               block_m: int, tile_w: int,
                                               sums: tuple[str, ...]) -> None:
    """3×3 stride 1 through tensor-memory-accelerator boxes: the copy engine's zero fill
    (negative coordinates at the top and left, past the end at the bottom and right) is the
    convolution's padding."""
    step = Conv("y", (term("x", cout, cin, 3),), fp16_exact(cout), relu=not sums,
                se_sum=sums[0] if sums else None)
    used = run_variant(step, {"x": nhwc(cin, 0)}, device, 0, tma_cfg(block_m, tile_w), sums)
    assert used["TILE_W"] == min(tile_w, 32)


def test_tma_leaves_other_terms_and_steps_alone(device: torch.device) -> None:
    """TMA reads term 0 only; a stride-2 term 0 (or the stem) keeps the gather loop."""
    from ttball.kernels.configs import tma_applies
    from ttball.kernels.launches import ConvLaunch

    step, bufs = every_term_kind()  # term 0: stride 2
    assert not tma_applies(step)
    run_variant(step, bufs, device, 1, tma_cfg(32, 8), sums=("s",))
    step = Conv("y", (term("x", 16, 16, 3), term("z", 16, 32, 1, up=1)), fp16_exact(16))
    assert tma_applies(step)
    run_variant(step, {"x": nhwc(16, 0), "z": nhwc(32, 1)}, device, 0, tma_cfg(64, 16))
    assert "TMA" in ConvLaunch(step, device).variant_meta(tma_cfg(64, 16), W)  # type: ignore[arg-type]


def test_whole_plan_with_tma(device: torch.device) -> None:
    """Every 3×3 stride-1 step of the plan through TMA boxes, the others as before (one
    configuration for every step on a GPU too: tuned, TMA might lose everywhere)."""
    from ttball.kernels.configs import Config
    from ttball.kernels.executor import TritonExecutor

    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    plan = build_plan(model)
    x = torch.randn(1, 9, 16, 32, generator=torch.Generator().manual_seed(0))
    expected = run_reference(plan, x)
    executor = TritonExecutor(plan, device, config=Config(64, 4, 3, tile_w=16, tma=True))
    out = executor(x.to(device)).cpu()
    rel = ((out - expected).norm() / expected.norm()).item()
    assert rel < 2e-3, f"relative error {rel:.1e} against the FP32 reference"


def rows_cfg(block_w: int, rows: int) -> object:
    from ttball.kernels.configs import Config

    return Config(block_w, 4, 1, rows=rows)


@pytest.mark.parametrize(("cin", "cout", "block_w", "rows", "sums", "add"), [
    (16, 16, 16, 8, (), False),    # 16 rows in two strips, 24 columns in two (half outside)
    (32, 32, 32, 16, ("s",), False),  # one strip wider than the image; SE sums once a program
    (16, 32, 16, 32, ("s",), True),   # rows past the image's 16; a coarser addend
    (32, 16, 16, 8, (), True),
])
def test_rows_walks_down_the_image(device: torch.device, cin: int, cout: int, block_w: int,
                                   rows: int, sums: tuple[str, ...], add: bool) -> None:
    """The row-walking kernel (ttball.kernels.rows) against the reference: padding at every
    edge, strips that end past the image, the epilogue's addend, SE sums and ReLU."""
    from ttball.kernels.configs import rows_applies

    addends = (("e", 1),) if add else ()
    step = Conv("y", (term("x", cout, cin, 3),), fp16_exact(cout), addends=addends,
                relu=not sums, se_sum=sums[0] if sums else None)
    assert rows_applies(step)
    bufs = {"x": nhwc(cin, 0)}
    if add:
        bufs["e"] = nhwc(cout, 1)
    run_variant(step, bufs, device, 0, rows_cfg(block_w, rows), sums)


def test_rows_leaves_other_steps_to_the_conv_kernel(device: torch.device) -> None:
    from ttball.kernels.configs import rows_applies

    wide = Conv("y", (term("x", 64, 64, 3),), fp16_exact(64), relu=True)
    strided = Conv("y", (term("x", 16, 16, 3, stride=2),), fp16_exact(16))
    two_terms = Conv("y", (term("x", 16, 16, 3), term("z", 16, 32, 1, up=1)), fp16_exact(16))
    assert not any(rows_applies(s) for s in (wide, strided, two_terms))
    run_variant(wide, {"x": nhwc(64, 0)}, device, 0, rows_cfg(32, 8))


def test_whole_plan_with_rows(device: torch.device) -> None:
    """The 16- and 32-channel 3×3 steps of the plan walk rows, the others as before."""
    from ttball.kernels.configs import Config
    from ttball.kernels.executor import TritonExecutor

    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    plan = build_plan(model)
    x = torch.randn(1, 9, 16, 32, generator=torch.Generator().manual_seed(0))
    expected = run_reference(plan, x)
    executor = TritonExecutor(plan, device, config=Config(32, 4, 1, rows=8))
    out = executor(x.to(device)).cpu()
    rel = ((out - expected).norm() / expected.norm()).item()
    assert rel < 2e-3, f"relative error {rel:.1e} against the FP32 reference"

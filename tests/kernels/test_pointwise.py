"""The resident-weight kernel for 1×1 steps (ttball.kernels.pointwise) against the reference
executor's ``run_conv`` on tiny shapes (interpreted on CPU, compiled on a GPU), its applies
check, its candidates, and the whole plan with it forced onto the steps it takes. Inputs and
weights FP16-representable, tolerances as ``test_conv.py``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from kernel_env import CUDA, DEVICE, require_triton
from test_conv import fp16_exact, term
from torch import Tensor

from ttball.kernels import build_plan, run_reference
from ttball.kernels.plan import INPUT, Conv, SqueezeTail
from ttball.kernels.reference import run_conv
from ttball.model import BlurBall, randomize_batchnorm

require_triton()
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

GEN = torch.Generator().manual_seed(3)


@pytest.fixture(scope="module")
def model() -> BlurBall:
    return randomize_batchnorm(BlurBall(), seed=0).eval()


def resident(block_m: int, programs: int = 0, stages: int = 3) -> object:
    from ttball.kernels.configs import Config

    return Config(block_m, 4, stages, programs=programs, resident=True)


def run_resident(step: Conv, bufs: dict[str, Tensor], config: object,
                 sums: tuple[str, ...] = ()) -> tuple[dict[str, Tensor], dict[str, Tensor], int]:
    """``step`` through the executor's launch with ``config`` on ``bufs`` (NHWC, full
    resolution); returns the output and SE sums (on CPU) and the number of programs. The
    output starts as NaN, so a pixel the loop over tiles missed fails the comparison."""
    from ttball.kernels.launches import ConvLaunch

    dev = {k: v.to(DEVICE, torch.float16).contiguous() for k, v in bufs.items()}
    b, h, w, _ = next(iter(bufs.values())).shape
    dev[step.out] = torch.full((b, h, w, step.cout), float("nan"), device=DEVICE,
                               dtype=torch.float16)
    dev_sums = {name: torch.zeros(b, step.cout, device=DEVICE) for name in sums}
    launch = ConvLaunch(step, DEVICE)
    call = launch.triton_call(dev, dev_sums, config)  # type: ignore[arg-type]
    assert call.kernel.__name__ == "pointwise_kernel"
    call.launch()
    out = {step.out: dev[step.out].float().cpu()}
    return out, {k: v.cpu() for k, v in dev_sums.items()}, call.grid[0]


def reference(step: Conv, bufs: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    ref, sums = dict(bufs), {}
    run_conv(step, ref, sums)
    return ref, sums


def nhwc(b: int, h: int, w: int, c: int) -> Tensor:
    return torch.randn(b, h, w, c, generator=GEN).half().float()


def test_one_term_loops_over_more_tiles_than_programs() -> None:
    """Step 2's kind (64 → 32, ReLU): 2 images × 4 tiles of 32 pixels on the grid of one SM,
    3 programs of 4 warps in the interpreter (on a GPU, 3 asked for), so programs 0 and 1
    compute three tiles each, program 2 two."""
    step = Conv("y", (term("x", 32, 64, 1),), fp16_exact(32), relu=True)
    bufs = {"x": nhwc(2, 8, 16, 64)}
    out, _, programs = run_resident(step, bufs, resident(32, programs=3 if CUDA else 0))
    assert programs == 3
    torch.testing.assert_close(out["y"], reference(step, bufs)[0]["y"], rtol=2e-3, atol=2e-3)


def test_two_terms_partial_last_tile() -> None:
    """Step 4's kind (32 + 64 → 128 from two buffers, ReLU) on 96 pixels an image: tiles of 64,
    the second half outside, four tiles on three programs (program 0 takes tiles 0 and 3).
    Without its second term the step would be something else."""
    step = Conv("y", (term("h", 128, 32, 1), term("x", 128, 64, 1)), fp16_exact(128),
                relu=True)
    bufs = {"h": nhwc(2, 8, 12, 32), "x": nhwc(2, 8, 12, 64)}
    out, _, programs = run_resident(step, bufs, resident(64, programs=3))
    assert programs == 3
    want = reference(step, bufs)[0]["y"]
    torch.testing.assert_close(out["y"], want, rtol=2e-3, atol=2e-3)
    first_only = reference(Conv("y", step.terms[:1], step.bias, relu=True), bufs)[0]["y"]
    assert (first_only - want).abs().max() > 0.1


def test_padded_channels_addend_and_se_sums() -> None:
    """The conv kernel's whole epilogue through the resident loop: 24 input channels (padded to
    32, masked), 40 output channels (of 64), an addend, per-image SE sums, no ReLU; tiles
    of 16 pixels (five an image, the last partial) on five programs."""
    step = Conv("y", (term("a", 40, 24, 1), term("b", 40, 16, 1)), fp16_exact(40),
                addends=(("e", 0),), se_sum="s")
    bufs = {"a": nhwc(2, 6, 12, 24), "b": nhwc(2, 6, 12, 16), "e": nhwc(2, 6, 12, 40)}
    out, sums, programs = run_resident(step, bufs, resident(16, programs=5, stages=2), ("s",))
    assert programs == 5
    ref, ref_sums = reference(step, bufs)
    torch.testing.assert_close(out["y"], ref["y"], rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(sums["s"], ref_sums["s"], rtol=1e-3, atol=1e-2)
    assert (ref_sums["s"][0] - ref_sums["s"][1]).abs().max() > 1.0  # per image, not summed


def test_applies_to_1x1_stride_1_steps_only(model: BlurBall) -> None:
    from ttball.kernels.pointwise import pointwise_applies

    bias = torch.zeros(32)
    assert pointwise_applies(Conv("y", (term("x", 32, 64, 1),), bias))
    assert pointwise_applies(Conv("y", (term("x", 32, 64, 1), term("z", 32, 16, 1)), bias))
    assert not pointwise_applies(Conv("y", (term("x", 32, 32, 3),), bias))
    assert not pointwise_applies(Conv("y", (term("x", 32, 64, 1), term("z", 32, 16, 3)), bias))
    assert not pointwise_applies(Conv("y", (term("x", 32, 64, 1, stride=2),), bias))
    assert not pointwise_applies(Conv("y", (term("x", 32, 64, 1), term("z", 32, 64, 1, up=1)),
                                      bias))
    assert not pointwise_applies(Conv("y", (term(INPUT, 32, 9, 1),), bias))  # the FP32 batch
    assert not pointwise_applies(Conv("y", (term("x", 256, 256, 1),), torch.zeros(256)))  # 128 KB
    tail = SqueezeTail("y", "r", "s", torch.randn(1, 16), torch.randn(16, 1), out="t")
    assert not pointwise_applies(tail)
    # BlurBall: layer1's conv1 (64 → 32) and conv3 + downsample (32 + 64 → 128); with
    # project_terms="conv" also the six projections of coarser branches to 16 channels
    steps = build_plan(model).steps
    assert [i for i, s in enumerate(steps) if pointwise_applies(s)] == [2, 4]
    assert [(t.cin, t.weight.shape[0]) for t in steps[4].terms] == [(32, 128), (64, 128)]
    conv_steps = build_plan(model, project_terms="conv").steps
    assert sum(pointwise_applies(s) for s in conv_steps) == 8


def test_candidates_are_offered_after_the_default(model: BlurBall) -> None:
    """The tuner's list for step 4 at batch 64 and 288 × 512 keeps the conv kernel's default
    first and ends with the resident candidates; a 3×3 step gets none."""
    from ttball.kernels.configs import Config, conv_configs, pointwise_configs
    from ttball.kernels.launches import ConvLaunch

    steps = build_plan(model).steps
    step4, stem = steps[4], steps[0]
    assert isinstance(step4, Conv) and isinstance(stem, Conv)
    pixels = 64 * 288 * 512
    names = [c.short() for c in pointwise_configs(step4, pixels)]
    assert names == ["m64w4s3RES", "m128w8s2RES"]
    assert pointwise_configs(stem, pixels) == []
    launch = ConvLaunch(step4, torch.device("cpu"))
    bufs = {step4.out: torch.empty(64, 288, 512, 128, device="meta")}
    configs = launch.configs(bufs)
    assert configs[0] == conv_configs(step4, pixels)[0] == Config(64, 4, 3)
    assert [c.short() for c in configs if c.resident] == names == [c.short() for c in configs[-2:]]


class _AlsoDefault:
    """A conv step's launch for the executor that, before each run with the tuner's choice,
    runs the default configuration on the same buffers and keeps both outputs (steps without
    SE sums, which would count twice)."""

    def __init__(self, launch: Any, chosen: object, default: object) -> None:
        assert not launch.step.se_sum
        self.launch, self.step, self.chosen, self.default = launch, launch.step, chosen, default
        self.outputs: list[tuple[Tensor, Tensor]] = []

    def configs(self, bufs: dict[str, Tensor]) -> list[object]:
        return [self.chosen]

    def __call__(self, bufs: dict[str, Tensor], sums: dict[str, Tensor], cfg: object) -> None:
        self.launch(bufs, sums, self.default)
        default = bufs[self.step.out].clone()
        bufs[self.step.out].fill_(float("nan"))  # nothing of the default's left in it
        self.launch(bufs, sums, cfg)
        self.outputs.append((default, bufs[self.step.out].clone()))


def test_executor_with_resident_steps_gives_the_default_logits(model: BlurBall) -> None:
    """The whole plan with steps 2 and 4 on the resident kernel (tiles of 16 pixels: 8 of them
    an image at 8 × 16, on 3 programs in the interpreter), each also run with the default
    configuration on the same inputs: the same output to FP16 rounding (both kernels make the
    same dots per pixel; the interpreter's matmuls over 16- and 128-row tiles may round
    differently), so the logits are the default run's. And they are the FP32 reference's to
    the tolerance of ``test_executor.py``."""
    from ttball.kernels.configs import Config
    from ttball.kernels.executor import TritonExecutor
    from ttball.kernels.pointwise import pointwise_applies

    plan = build_plan(model)
    x = torch.randn(1, 9, 8, 16, generator=torch.Generator().manual_seed(0))
    plain = None if CUDA else Config(128, 4, 2)  # one tile an image: the interpreter's fastest
    executor = TritonExecutor(plan, DEVICE, tune=False)
    wrapped = []
    for i, launch in enumerate(executor.launches):
        step = launch.step
        if pointwise_applies(step):
            out = {step.out: torch.empty(1, 8, 16, step.cout, device="meta")}
            wrapped.append(_AlsoDefault(launch, resident(16), plain or launch.configs(out)[0]))
            executor.launches[i] = wrapped[-1]  # type: ignore[call-overload]
        elif plain is not None:
            launch.configs = lambda bufs: [plain]  # type: ignore[method-assign]
    logits = executor(x.to(DEVICE)).cpu()
    chosen = executor.chosen(tuple(x.shape))
    assert [i for i, (_, cfg) in enumerate(chosen) if cfg.resident] == [2, 4]
    for launch in wrapped:
        [(default, got)] = launch.outputs
        assert not got.isnan().any(), launch.step.out  # every pixel written
        torch.testing.assert_close(got, default, rtol=2e-3, atol=2e-3)
    expected = run_reference(plan, x)
    rel = ((logits - expected).norm() / expected.norm()).item()
    assert rel < 2e-3, f"relative error {rel:.1e} against the FP32 reference"


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_step_4_at_full_resolution_matches_the_default_config(model: BlurBall) -> None:
    """BlurBall's step 4 (32 + 64 → 128, ReLU) at batch 8 and 288 × 512 (18432 tiles of 64
    pixels, about 47 a program on an H200's 132 SMs), each resident candidate against the conv
    kernel's default."""
    from ttball.kernels.configs import conv_configs, pointwise_configs
    from ttball.kernels.launches import ConvLaunch

    step = build_plan(model).steps[4]
    assert isinstance(step, Conv)
    gen = torch.Generator(device=DEVICE).manual_seed(4)
    bufs = {t.src: torch.randn(8, 288, 512, t.cin, device=DEVICE, generator=gen).half()
            for t in step.terms}
    launch = ConvLaunch(step, DEVICE)
    pixels = 8 * 288 * 512

    def run(config: object) -> Tensor:
        bufs[step.out] = torch.full((8, 288, 512, step.cout), float("nan"), device=DEVICE,
                                    dtype=torch.float16)
        launch(bufs, {}, config)  # type: ignore[arg-type]
        return bufs[step.out].float()

    want = run(conv_configs(step, pixels)[0])
    for config in pointwise_configs(step, pixels):
        got = run(config)
        torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3,
                                   msg=lambda m, c=config: f"{c.short()}: {m}")

"""scripts/activation_precision.py, the CPU check of 8-bit activation storage: step sets,
static per-channel scales, and that ``FORMAT@STEPS`` rounds only those steps' outputs."""

from __future__ import annotations

import pytest
import torch
from script_env import load_script

from ttball.kernels import build_plan
from ttball.kernels import reference as ref


@pytest.fixture(scope="module")
def script():
    return load_script("activation_precision")


def test_step_sets_parse_and_bad_ones_are_refused(script) -> None:
    assert script.parse_steps("0-6") == frozenset(range(7))
    assert script.parse_steps("4") == frozenset({4})
    assert script.parse_steps("1-2+5") == frozenset({1, 2, 5})
    for bad in ("6-0", "x", "1-", "-3"):
        with pytest.raises(SystemExit, match="--steps"):
            script.parse_steps(bad)


def test_static_scales_round_to_255_levels_after_relu_and_clamp_above_the_maximum(script) -> None:
    cal = script.Calibrated()
    cal.observe("x", torch.tensor([[[[0.0, 1.0], [2.0, 4.0]]]]))  # NHWC: channels 1 and 4 max
    cal.observe("x", torch.tensor([[[[0.5, 0.5]]]]))
    assert cal.amax["x"].tolist() == [2.0, 4.0] and cal.signed["x"] is False
    x = torch.tensor([[[[1.1, 5.0]]]])
    q = cal.quantize("x", x)
    assert q[..., 0].item() == pytest.approx(140 * 2 / 255)  # 1.1 / (2 / 255) = 140.25
    assert q[..., 1].item() == pytest.approx(4.0)  # clamped at the calibrated maximum
    assert cal.quantize("x", x, headroom=2.0)[..., 1].item() == pytest.approx(5.0, abs=4 / 255)
    cal.observe("y", torch.tensor([[[[-1.0]]]]))
    assert cal.signed["y"] and cal.quantize("y", torch.tensor([[[[-3.0]]]])).item() == -1.0


def test_a_step_set_rounds_only_those_steps_outputs(script, small_model) -> None:
    plan = build_plan(small_model)
    seen: dict[str, tuple[torch.Tensor, torch.Tensor, bool]] = {}
    fp16 = script.FORMATS["fp16"]

    def coarse(x: torch.Tensor) -> torch.Tensor:  # visibly coarser than FP16
        return torch.round(x * 4) / 4

    script.FORMATS["coarse"] = coarse
    try:
        emulated = script.Emulated(plan, "coarse@4")
        original = emulated._store

        def store(name, x, chosen):
            out = original(name, x, chosen)
            seen[name] = (x, out, chosen)
            return out

        emulated._store = store
        h, w = small_model.config.input_size
        emulated(torch.rand(1, 9, h, w))
    finally:
        del script.FORMATS["coarse"]
    chosen = {name for name, (_, _, c) in seen.items() if c}
    assert chosen == {plan.steps[4].out}
    for x, out, c in seen.values():
        torch.testing.assert_close(out, coarse(x) if c else fp16(x))
    assert ref.OUTPUT not in seen


def test_calibrated_storage_needs_calibration(script, small_model) -> None:
    with pytest.raises(SystemExit, match="--calibrate"):
        script.Emulated(build_plan(small_model), "u8-cal@4")


def test_e4m3_scales_per_pixel_and_per_output_channel(script) -> None:
    """A pixel's channels share one scale (its maximum maps to e4m3's largest, 448), so a
    pixel of small values keeps its precision beside a bright one; weights likewise per output
    channel. e4m3 keeps 3 mantissa bits: relative error ≤ 2⁻⁴ away from zero."""
    x = torch.tensor([[[[1000.0, 1.0, 3.0], [0.01, 0.02, 0.0]]]])  # NHWC, two pixels
    q = script.e4m3_pixel(x)
    assert q[0, 0, 0, 0].item() == pytest.approx(1000.0)  # each pixel's maximum exact
    assert q[0, 0, 1, 1].item() == pytest.approx(0.02)
    assert q[0, 0, 1, 0].item() == pytest.approx(0.01, rel=2**-4)  # not lost beside 1000
    torch.testing.assert_close(q, x, rtol=2**-4, atol=1000 / 448 * 2**-9)
    w = torch.randn(4, 3, 3, 3) * torch.tensor([1e-3, 1.0, 10.0, 100.0])[:, None, None, None]
    qw = script.e4m3_out_channel(w)
    for o in range(4):  # each output channel's largest weight exact, the rest within 2⁻⁴
        top = w[o].abs().max()
        assert qw[o].abs().max().item() == pytest.approx(top.item(), rel=1e-6)
        assert ((qw[o] - w[o]).abs() <= top * 2**-4).all()
    assert not torch.equal(qw, w)


def test_fp8_mma_runs_only_the_chosen_steps_in_fp8(script, small_model) -> None:
    """``fp8mma@1``: step 1 from e4m3 inputs and weights (close to FP16, not equal); every
    other step as ``fp16``'s; all outputs stored as FP16; its steps are required."""
    plan = build_plan(small_model)
    h, w = small_model.config.input_size
    batch = torch.rand(1, 9, h, w)
    outs: dict[str, dict[str, torch.Tensor]] = {}
    for fmt in ("fp16", "fp8mma@1"):
        emulated = script.Emulated(plan, fmt)
        original, seen = emulated._store, {}

        def store(name, x, chosen, original=original, seen=seen):
            seen[name] = original(name, x, chosen)  # as stored
            return seen[name]

        emulated._store = store
        emulated(batch)
        outs[fmt] = seen
    step0, step1 = plan.steps[0].out, plan.steps[1].out
    torch.testing.assert_close(outs["fp8mma@1"][step0], outs["fp16"][step0])  # before: same
    x2, fp16_x2 = outs["fp8mma@1"][step1], outs["fp16"][step1]
    assert not torch.equal(x2, fp16_x2)
    assert torch.equal(x2, x2.half().float())  # stored as FP16
    rel = (x2 - fp16_x2).norm() / fp16_x2.norm()
    assert 1e-4 < rel.item() < 0.1, rel  # e4m3's rounding, not a different convolution
    with pytest.raises(SystemExit, match="fp8mma@1"):
        script.Emulated(plan, "fp8mma")
    with pytest.raises(SystemExit, match="fp8mma-win@1"):
        script.Emulated(plan, "fp8mma-win")


def test_a_window_scale_is_one_per_window(script) -> None:
    """``fp8mma-win``: each window of a batch its own scale (a dim window beside a bright one
    keeps its precision), every element of a window the same scale."""
    x = torch.tensor([[[[100.0, 1.0]]], [[[0.1, 0.001]]]])  # two windows, one pixel each
    q = script.e4m3_window(x)
    assert q[0, 0, 0, 0].item() == pytest.approx(100.0) and q[1, 0, 0, 0].item() == pytest.approx(0.1)
    assert q[1, 0, 0, 1].item() == pytest.approx(0.001, rel=2**-3)  # 0.001 of 0.1: still normal
    torch.testing.assert_close(q, x, rtol=2**-4, atol=0.0)


def test_unscaled_inputs_are_cast_as_they_are_and_saturate(script) -> None:
    """``fp8mma-one``: no scale; e4m3's own range (normal from 2⁻⁶, largest 448), saturated."""
    x = torch.tensor([[[[1000.0, -1000.0, 3.3, 0.02, 0.0]]]])
    q = script.e4m3_unscaled(x)[0, 0, 0]
    assert q[:2].tolist() == [448.0, -448.0]
    assert q[2].item() == pytest.approx(3.25) and q[3].item() == pytest.approx(0.02, rel=2**-4)
    assert q[4].item() == 0.0



def test_fp8_mma_rounds_the_operands_it_is_given(script, small_model) -> None:
    """``run_fp8_mma`` with both roundings the identity is the reference step; with one
    operand rounded, it differs from the reference and from the other operand's rounding."""
    plan = build_plan(small_model)
    step = plan.steps[1]
    h, w = small_model.config.input_size
    src = step.terms[0].src
    bufs = {src: torch.rand(1, h, w, step.terms[0].cin)}
    plain = dict(bufs)
    ref.run_conv(step, plain, {})
    outs = {}
    for name, (inputs, weights) in {"none": (lambda x: x, lambda w: w),
                                    "inputs": (script.e4m3_pixel, lambda w: w),
                                    "weights": (lambda x: x, script.e4m3_out_channel)}.items():
        got = dict(bufs)
        script.run_fp8_mma(step, got, {}, inputs, weights)
        outs[name] = got[step.out]
    torch.testing.assert_close(outs["none"], plain[step.out])
    for name in ("inputs", "weights"):
        assert not torch.allclose(outs[name], plain[step.out], rtol=1e-4, atol=1e-5), name
    assert not torch.equal(outs["inputs"], outs["weights"])

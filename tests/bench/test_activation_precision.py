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

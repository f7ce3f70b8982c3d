from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ttball.model import BlurBall, count_parameters

FIXTURE = Path(__file__).parent.parent / "fixtures" / "blurball_state_dict.tsv"


def _count(model: nn.Module, kind: type) -> int:
    return sum(isinstance(m, kind) for m in model.modules())


def test_module_counts() -> None:
    model = BlurBall()
    assert _count(model, nn.Conv2d) == 72
    assert _count(model, nn.BatchNorm2d) == 71
    assert _count(model, nn.Linear) == 36
    assert _count(model, nn.Upsample) == 10
    assert count_parameters(model) == 1_488_531


def test_state_dict_matches_published_names_and_shapes() -> None:
    rows = [line.rstrip("\n").split("\t") for line in FIXTURE.read_text().splitlines()[1:]]
    expected = {key: (shape, dtype) for key, shape, dtype in rows}
    state = BlurBall().state_dict()
    actual = {
        k: ("x".join(map(str, v.shape)) if v.dim() else "scalar", str(v.dtype).replace("torch.", ""))
        for k, v in state.items()
    }
    assert list(actual) == list(expected)  # same names in the same order
    assert actual == expected
    assert sum(v.numel() for v in state.values()) == 1_495_354


def test_flops_and_output_shape_at_published_size() -> None:
    model = BlurBall().eval()
    x = torch.randn(1, 9, 288, 512)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        out = model(x)
    assert round(counter.get_total_flops() / 1e9, 1) == 56.3
    assert list(out) == [0]
    assert out[0].shape == (1, 3, 288, 512)


def test_batched_output_matches_single() -> None:
    torch.manual_seed(0)
    model = BlurBall().eval()
    x = torch.randn(2, 9, 72, 128)
    with torch.no_grad():
        both = model(x)[0]
        first = model(x[:1])[0]
    assert both.shape == (2, 3, 72, 128)
    torch.testing.assert_close(both[:1], first, rtol=1e-4, atol=1e-5)

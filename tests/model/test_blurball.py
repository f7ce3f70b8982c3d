from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ttball.model import BlurBall, count_parameters, save_checkpoint
from ttball.model.blurball import check_input_size

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


@pytest.mark.parametrize("size", [(36, 64), (72, 132), (0, 64), (-8, 64)])
def test_an_input_size_the_network_cannot_take_is_named(size: tuple[int, int], tmp_path: Path) -> None:
    """36x64 failed deep in a fuse layer ("The size of tensor a (36) must match the size of
    tensor b (40)"); a checkpoint could be saved with such a size and every window failed."""
    message = f"input size {size[0]}x{size[1]}: height and width must be positive multiples of 8"
    with pytest.raises(ValueError, match=message):
        check_input_size(*size)
    if min(size) > 0:
        with pytest.raises(ValueError, match=message):
            BlurBall().eval()(torch.zeros(1, 9, *size))
        model = BlurBall()
        model.config = model.config.evolve(input_height=size[0], input_width=size[1])
        with pytest.raises(ValueError, match=message):
            save_checkpoint(tmp_path / "w.safetensors", model)
        assert list(tmp_path.iterdir()) == []

from pathlib import Path

import pytest
import torch

from ttball.errors import CheckpointError, UserError
from ttball.model import BlurBall, load_checkpoint, load_model, save_checkpoint


def _outputs(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(x)[0]


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    return torch.randn(1, 9, 72, 128, generator=torch.Generator().manual_seed(1))


def test_published_format_round_trips_with_identical_outputs(tmp_path, small_model, x) -> None:
    path = tmp_path / "blurball_best.pth.tar"
    state = {f"module.{k}": v for k, v in small_model.state_dict().items()}
    torch.save({"epoch": 30, "model_state_dict": state, "optimizer_state_dict": {}}, path)
    loaded = load_model(path)
    assert torch.equal(_outputs(loaded, x), _outputs(small_model, x))


def test_bare_state_dict_without_bn_counters_loads(tmp_path, small_model, x) -> None:
    path = tmp_path / "bare.pt"
    state = {k: v for k, v in small_model.state_dict().items() if "num_batches" not in k}
    torch.save(state, path)
    assert torch.equal(_outputs(load_model(path), x), _outputs(small_model, x))


def test_safetensors_keeps_config_and_hash(small_weights: Path, small_model, x) -> None:
    model = load_model(small_weights)
    assert model.config.name == "test-small"
    assert model.config.input_size == (72, 128)
    assert len(model.config.sha256) == 64
    assert torch.equal(_outputs(model, x), _outputs(small_model, x))
    _, config = load_checkpoint(small_weights)
    assert config.sha256 == model.config.sha256


def test_save_is_deterministic_hash(tmp_path, small_model) -> None:
    a = save_checkpoint(tmp_path / "a.safetensors", small_model)
    b = save_checkpoint(tmp_path / "b.safetensors", small_model)
    assert a.sha256 == b.sha256


def _broken(tmp_path: Path, mutate) -> Path:
    state = BlurBall().state_dict()
    mutate(state)
    path = tmp_path / "broken.pt"
    torch.save({"model_state_dict": state}, path)
    return path


def test_missing_tensor_is_named(tmp_path) -> None:
    path = _broken(tmp_path, lambda s: s.pop("stage3.0.branches.2.1.conv2.weight"))
    with pytest.raises(CheckpointError, match=r"1 missing \(stage3\.0\.branches\.2\.1\.conv2\.weight\)"):
        load_model(path)


def test_unexpected_tensor_is_named(tmp_path) -> None:
    path = _broken(tmp_path, lambda s: s.update({"head.extra.weight": torch.zeros(3)}))
    with pytest.raises(CheckpointError, match=r"1 unexpected \(head\.extra\.weight\)"):
        load_model(path)


def test_misshaped_tensor_is_named(tmp_path) -> None:
    path = _broken(tmp_path, lambda s: s.update({"conv1.weight": torch.zeros(64, 3, 3, 3)}))
    with pytest.raises(CheckpointError, match=r"mis-shaped \(conv1\.weight \(64, 3, 3, 3\) != \(64, 9, 3, 3\)\)"):
        load_model(path)


def test_many_missing_are_summarised(tmp_path) -> None:
    path = _broken(tmp_path, lambda s: [s.pop(k) for k in list(s) if k.startswith("stage4")])
    with pytest.raises(CheckpointError, match=r"missing \(.*and \d+ more\)"):
        load_model(path)


@pytest.mark.parametrize(
    "content, message",
    [(b"not a checkpoint at all", "cannot read checkpoint"), (b"", "cannot read checkpoint")],
)
def test_garbage_files_get_one_clear_error(tmp_path, content, message) -> None:
    path = tmp_path / "junk.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=message):
        load_model(path)


def test_garbage_safetensors(tmp_path) -> None:
    path = tmp_path / "junk.safetensors"
    path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{nonsense")
    with pytest.raises(CheckpointError, match="cannot read safetensors"):
        load_model(path)


def test_pickled_objects_are_refused(tmp_path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"model_state_dict": BlurBall().state_dict(), "hook": object()}, path)
    with pytest.raises(CheckpointError, match="cannot read checkpoint") as refused:
        load_model(path)
    # one short line: not torch's advice to load it with weights_only=False, no colour codes
    message = str(refused.value)
    assert "weights_only" not in message and "\x1b" not in message and len(message) < 300
    assert "not a .safetensors file or a PyTorch state dict (UnpicklingError" in message


def test_not_a_state_dict(tmp_path) -> None:
    path = tmp_path / "list.pt"
    torch.save([1, 2, 3], path)
    with pytest.raises(CheckpointError, match="holds no state dict"):
        load_model(path)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        load_model(tmp_path / "nope.safetensors")


def test_saved_weights_get_the_umask_mode_or_keep_their_own(small_model, tmp_path) -> None:
    """safetensors wrote its file 0600: ``train``'s weights were private beside a 0644 last.pt."""
    import os
    import stat

    from ttball.results import file_mode

    path = tmp_path / "w.safetensors"
    save_checkpoint(path, small_model)
    assert stat.S_IMODE(path.stat().st_mode) == file_mode(tmp_path / "new") != 0o600
    os.chmod(path, 0o640)
    save_checkpoint(path, small_model)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


@pytest.mark.parametrize("device, message", [
    ("tpu", "unknown device 'tpu'"), (None, "unknown device None"),
    pytest.param("cuda", "no CUDA GPU", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="this machine has a GPU"))])
def test_load_model_names_a_device_it_cannot_use(device, message) -> None:
    """load_model skipped the device check that create and track make: "cuda" without a GPU
    was torch's AssertionError after the weights had loaded, "auto" and "tpu" RuntimeErrors."""
    with pytest.raises(UserError, match=message):
        load_model(device=device)


def test_load_model_takes_auto() -> None:
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert next(load_model(device="auto").parameters()).device.type == want


@pytest.mark.parametrize("call", ["describe", "unavailable_reason"])
def test_backend_listing_names_an_unknown_device(call) -> None:
    from ttball.backends import base

    with pytest.raises(UserError, match="unknown device 'tpu'"):
        base.describe("tpu") if call == "describe" else base.unavailable_reason("eager-fp32", "tpu")


def test_weights_saved_under_another_suffix_load_back(tmp_path: Path, small_model) -> None:
    """save_checkpoint writes safetensors whatever the name; a ``.pth`` name then failed to
    load ("not a .safetensors file or a PyTorch state dict")."""
    path = tmp_path / "weights.pth"
    saved = save_checkpoint(path, small_model)
    state, config = load_checkpoint(path)
    assert config == saved and state.keys() == small_model.state_dict().keys()


@pytest.mark.parametrize("changes, message", [
    ({"score_threshold": 5.0}, "score_threshold must be between 0 and 1"),
    ({"score_threshold": float("nan")}, "score_threshold"),
    ({"input_height": 0}, "positive integers"),
    ({"input_width": 128.5}, "positive integers"),
    ({"frames_in": 2}, "frames_in must be 3"),
    ({"mean": (0.5,)}, "mean must be 3 finite numbers"),
    ({"std": (0.2, 0.0, 0.2)}, "std must be positive"),
])
def test_a_weights_configuration_the_network_cannot_use_is_refused(changes, message) -> None:
    """A threshold of 5 was saved, loaded back and made every frame "no ball"."""
    from ttball.model.config import WeightsConfig

    with pytest.raises(ValueError, match=message):
        WeightsConfig().evolve(**changes)


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"score_threshold": 5}',
                                  '{"mean": 3}'])
def test_bad_configuration_metadata_is_a_checkpoint_error(tmp_path: Path, small_model,
                                                          text) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in small_model.state_dict().items()}, str(path),
              metadata={"ttball.config": text})
    with pytest.raises(CheckpointError, match="not a ttball weights configuration"):
        load_checkpoint(path)


def test_a_checkpoint_whose_input_size_the_network_cannot_take_is_refused(
        tmp_path: Path, small_model) -> None:
    """Its config loaded, and every window then failed in the network."""
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    config = small_model.config.evolve(input_height=36, input_width=64)
    save_file({k: v.contiguous() for k, v in small_model.state_dict().items()}, str(path),
              metadata={"ttball.config": config.to_json()})
    with pytest.raises(CheckpointError, match=f"{path}: its configuration's input size 36x64: "
                                              "height and width must be positive multiples of 8"):
        load_model(path)

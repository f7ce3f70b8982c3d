"""``ttball.track``'s arguments: a ready backend brings its model's settings; conflicting or
mistyped ones are refused by name."""

import copy
from pathlib import Path

import pytest

from ttball.backends import create
from ttball.errors import UserError
from ttball.pipeline import track


def test_a_ready_backend_without_model_uses_its_own_models_settings(clip: Path, small_model) -> None:
    """It ran with the default WeightsConfig instead: 288x512 and the name "random-init"."""
    model = copy.deepcopy(small_model)
    result = track(clip, backend=create("eager-fp32", model, "cpu"), device="cpu")
    assert result.weights == model.config
    assert result.weights.input_size == model.config.input_size != (288, 512)


def test_weights_with_a_model_or_a_ready_backend_is_refused(clip: Path, small_model,
                                                            small_weights) -> None:
    """weights= was silently ignored (even a missing file) when model= or a backend came too."""
    ready = create("eager-fp32", copy.deepcopy(small_model), "cpu")
    for kwargs in ({"model": small_model}, {"backend": ready}):
        with pytest.raises(UserError, match="weights= builds the network"):
            track(clip, weights=small_weights, device="cpu", **kwargs)


def test_a_path_as_model_or_a_model_as_backend_is_a_type_error(clip: Path, small_model,
                                                              small_weights) -> None:
    with pytest.raises(TypeError, match="model must be a loaded BlurBall.*weights="):
        track(clip, model=str(small_weights), device="cpu")
    with pytest.raises(TypeError, match="backend must be a registry name or a ready Backend"):
        track(clip, backend=42, device="cpu")

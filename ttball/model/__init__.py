from ttball.model.blurball import BlurBall, count_parameters, randomize_batchnorm
from ttball.model.config import WeightsConfig
from ttball.model.weights import (
    default_weights_path,
    load_checkpoint,
    load_model,
    save_checkpoint,
    state_dict_sha256,
)

__all__ = [
    "BlurBall",
    "WeightsConfig",
    "count_parameters",
    "default_weights_path",
    "load_checkpoint",
    "load_model",
    "randomize_batchnorm",
    "save_checkpoint",
    "state_dict_sha256",
]

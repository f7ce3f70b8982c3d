"""The configuration that travels with a checkpoint: what pre- and post-processing need."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ttball.postprocess import check_threshold


@dataclass(frozen=True)
class WeightsConfig:
    """Input geometry, normalisation and decision threshold of one set of weights.

    ``metrics`` holds what was measured with these weights (e.g. F1 on held-out synthetic clips)
    and ``source`` says where they came from; ``sha256`` is the hash of the tensors.
    """

    name: str = "random-init"
    input_height: int = 288
    input_width: int = 512
    frames_in: int = 3
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    resize: str = "bilinear"
    score_threshold: float = 0.5
    sha256: str = ""
    source: str = ""
    metrics: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        """A ``ValueError`` naming the first setting the network or the post-processing can't
        use: a threshold of 5, saved and loaded back, made every frame "no ball"."""
        sizes = (self.input_height, self.input_width)
        if not all(isinstance(n, int) and n > 0 for n in sizes):  # (the network's 8: its call's)
            raise ValueError(f"input size {self.input_height}x{self.input_width}: height and "
                             "width must be positive integers")
        if self.frames_in != 3:
            raise ValueError(f"frames_in must be 3 (the network reads 9 channels), got "
                             f"{self.frames_in}")
        for key in ("mean", "std"):
            values = getattr(self, key)
            if len(values) != 3 or not all(math.isfinite(v) for v in values):
                raise ValueError(f"{key} must be 3 finite numbers (R, G, B), got {values}")
        if not all(v > 0 for v in self.std):
            raise ValueError(f"std must be positive, got {self.std}")
        check_threshold(self.score_threshold, "score_threshold")

    @property
    def input_size(self) -> tuple[int, int]:
        """(height, width) of the network's input."""
        return self.input_height, self.input_width

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> WeightsConfig:
        data = json.loads(text)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key in ("mean", "std"):
            if key in known:
                known[key] = tuple(float(v) for v in known[key])
        return cls(**known)

    def evolve(self, **changes: Any) -> WeightsConfig:
        return replace(self, **changes)


RANDOM_INIT = WeightsConfig()

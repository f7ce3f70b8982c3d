"""The configuration that travels with a checkpoint: what pre- and post-processing need."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any


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

"""The online tracker of the published tools (``shared/spec/blurball.md``, "tracking").

When the previous frame had the ball, only candidates within ``max_jump_px`` (300 px in the
original frame) of its position are kept; the best-scoring candidate wins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ttball.postprocess import Detection

DEFAULT_MAX_JUMP_PX = 300.0


def check_max_jump(max_jump_px: float) -> None:
    """``ValueError`` unless the gate is positive (``inf`` keeps every candidate): at or below
    0, or NaN, every candidate after the first frame was dropped."""
    if not max_jump_px > 0:  # also NaN
        raise ValueError(f"max_jump_px must be positive, got {max_jump_px}: at or below 0 "
                         "(or NaN) the ball is lost after its first frame")


class OnlineTracker:
    """Feed one frame's candidates at a time, in frame order; get the chosen ball or None."""

    def __init__(self, max_jump_px: float = DEFAULT_MAX_JUMP_PX) -> None:
        check_max_jump(max_jump_px)
        self.max_jump_px = max_jump_px
        self.previous: Detection | None = None

    def update(self, candidates: Sequence[Detection]) -> Detection | None:
        if self.previous is not None:
            px, py = self.previous.x, self.previous.y
            candidates = [
                c for c in candidates if math.hypot(c.x - px, c.y - py) <= self.max_jump_px
            ]
        best = max(candidates, key=lambda c: c.score, default=None)
        self.previous = best
        return best

    def reset(self) -> None:
        self.previous = None

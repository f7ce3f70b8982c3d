"""Synthetic table-tennis rally clips with exact per-frame ground truth.

``generate_clip(seed, config)`` renders one clip in memory (for a training loop);
``write_dataset`` writes ``clip_XXXX.mp4`` + ``clip_XXXX.csv`` + ``manifest.json`` in parallel
(the manifest last: a folder without one is not a complete data set, and ``read_manifest`` says
so in one line).
See ``docs/synth.md`` for what varies and the ground-truth conventions.
"""

from ttball.synth.clip import (
    FPS_CHOICES,
    ClipConfig,
    ClipPlan,
    clip_seed,
    generate_clip,
    plan_clip,
    write_clip,
)
from ttball.synth.dataset import read_manifest, write_dataset
from ttball.synth.scene import SIZES

__all__ = [
    "FPS_CHOICES",
    "SIZES",
    "ClipConfig",
    "ClipPlan",
    "clip_seed",
    "generate_clip",
    "plan_clip",
    "read_manifest",
    "write_clip",
    "write_dataset",
]

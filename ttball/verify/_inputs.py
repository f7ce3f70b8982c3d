"""The clips a verification runs on: checked before any network runs, with their ground truth,
and the bundled synthetic clips a worker verifies on when it has no recorded match at hand."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ttball.errors import UserError, VideoError
from ttball.frames import IMAGE_SUFFIXES, FrameSource, SourceInfo
from ttball.results import FrameResult, read_track_csv

# Bundled clips: `ttball synth`'s default 1280×720 rally, a few dozen frames each. Seed 0 gives an
# orange ball seen from the end (100 fps, visible in 43/48 frames) and a white one from the side
# (30 fps, 48/48); the shipped weights track them with F1 1.00 and 0.97 (eager FP32, CPU).
BUNDLED_SEED = 0
BUNDLED_SIZE = (1280, 720)
_BUNDLED_VERSION = "v1"  # bump when the renderer changes, so stale cached clips are not reused


@dataclass(frozen=True)
class Clip:
    """A video file or image folder to verify on, and its ground truth if there is one."""

    path: Path
    name: str
    info: SourceInfo
    gt: list[FrameResult] | None = None
    gt_path: Path | None = None


def prepare_clips(
    clips: Sequence[str | os.PathLike[str]], gt_dir: str | os.PathLike[str] | None = None
) -> list[Clip]:
    """Open every clip (fails with a one-line :class:`UserError` on the first bad one) and read
    its ground truth: ``GT_DIR/<name>.csv``, else a CSV of the same name beside the clip. One
    path alone is one clip (a string was taken for a list of one-letter clips)."""
    if isinstance(clips, (str, os.PathLike)):
        clips = [clips]
    if not clips:
        raise UserError("no clips to verify on")
    if gt_dir is not None and not Path(gt_dir).is_dir():
        raise UserError(f"--gt {gt_dir}: not a folder")
    out: list[Clip] = []
    taken: set[str] = set()
    for raw in clips:
        path = Path(raw)
        info = FrameSource(path).info
        if path.is_dir():
            check_image_sizes(path)
        name = _unique(path.stem or path.name, taken)
        gt_path = ground_truth_path(path, gt_dir)
        gt = read_track_csv(gt_path) if gt_path else None
        out.append(Clip(path, name, info, gt, gt_path))
    if gt_dir is not None and not any(c.gt_path for c in out):  # (the report left it out)
        wanted = ", ".join(sorted({f"{c.path.stem if c.path.is_file() else c.path.name}.csv"
                                   for c in out}))
        raise UserError(f"--gt {gt_dir}: holds none of the clips' ground truth ({wanted})")
    return out


def _unique(name: str, taken: set[str]) -> str:
    candidate, k = name, 2
    while candidate in taken:
        candidate, k = f"{name}-{k}", k + 1
    taken.add(candidate)
    return candidate


def ground_truth_path(clip: Path, gt_dir: str | os.PathLike[str] | None) -> Path | None:
    """``GT_DIR/<stem>.csv`` or, without ``gt_dir``, ``clip.csv`` beside ``clip.mp4`` (a
    folder ``frames/`` pairs with ``frames.csv``); None when there is none."""
    stem = clip.stem if clip.is_file() else clip.name
    where = Path(gt_dir) / f"{stem}.csv" if gt_dir is not None else clip.parent / f"{stem}.csv"
    return where if where.is_file() else None


def check_image_sizes(folder: Path) -> None:
    """Refuse a folder whose images differ in size (several clips in one folder): the stream
    would skip every frame unlike the first as corrupt. Reads only the image headers."""
    from PIL import Image  # pillow comes with matplotlib, a dependency

    first: tuple[str, tuple[int, int]] | None = None
    for p in sorted(q for q in folder.iterdir() if q.suffix.lower() in IMAGE_SUFFIXES):
        try:
            with Image.open(p) as im:
                size = im.size
        except OSError:
            continue  # unreadable: the decoder skips it as a corrupt frame, for both backends
        if first is None:
            first = (p.name, size)
        elif size != first[1]:
            raise VideoError(
                f"{folder}: images of different sizes in one folder ({first[0]} is "
                f"{first[1][0]}x{first[1][1]}, {p.name} is {size[0]}x{size[1]}); "
                "give each clip its own folder"
            )


def bundled_reference_clips(
    count: int = 2, frames: int = 48, cache_dir: str | os.PathLike[str] | None = None
) -> list[Path]:
    """``count`` seeded synthetic clips (1280×720, ``frames`` frames, with ground truth CSVs),
    rendered on first use by :mod:`ttball.synth` and cached under ``cache_dir`` (default: the
    system temp folder). About 1 s per clip to render; reused afterwards."""
    if count < 1 or frames < 3:
        raise UserError(f"bundled clips: need count >= 1 and frames >= 3, got {count}, {frames}")
    from ttball.synth import ClipConfig, clip_seed, plan_clip, write_clip

    root = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "ttball-verify-clips"
    folder = root / f"seed{BUNDLED_SEED}-{frames}f-{_BUNDLED_VERSION}"
    folder.mkdir(parents=True, exist_ok=True)
    config = ClipConfig(size=BUNDLED_SIZE, frames=frames)
    paths = []
    for k in range(count):
        name = f"clip_{k:04d}"
        video, truth = folder / f"{name}.mp4", folder / f"{name}.csv"
        if not (video.is_file() and truth.is_file()):
            # Render beside the cache and move into place: concurrent workers never see half a clip.
            tmp = Path(tempfile.mkdtemp(prefix=".render-", dir=folder))
            try:
                write_clip(plan_clip(clip_seed(BUNDLED_SEED, k), config), tmp, name)
                os.replace(tmp / f"{name}.csv", truth)
                os.replace(tmp / f"{name}.mp4", video)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        paths.append(video)
    return paths

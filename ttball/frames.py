"""Frames in: decoding videos and image folders, resizing, normalising, duplicates, windows.

Decoded frames are RGB ``uint8 (H, W, 3)``. The network sees each frame resized straight to the
config's W×H (bilinear, aspect not kept); resized frames stay ``uint8`` until the batch reaches
the backend's device, where :func:`normalize` turns them into floats (4× fewer bytes to move).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch import Tensor

from ttball.errors import VideoError
from ttball.model.config import WeightsConfig

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}
# How every image is decoded on the host: three channels, pixels as stored. OpenCV would
# otherwise turn a JPEG by its EXIF orientation, which the GPU decoders (nvJPEG) and the
# header's size (ttball.serve.uploads.header_size) do not: one frame would then differ by path.
IMREAD_FLAGS = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION
# A decoder that fails this many frames in a row has reached the end of what it can read.
MAX_CONSECUTIVE_FAILURES = 25


@dataclass
class Frame:
    """One decoded frame: its index in the source, its time, and the RGB pixels."""

    index: int
    time_s: float
    rgb: np.ndarray


@dataclass
class SourceInfo:
    path: str
    kind: str
    width: int
    height: int
    fps: float
    frame_count: int  # as the container declares it (a video) or the images found
    corrupt_frames: list[int] = field(default_factory=list)
    # frames that decoded at another size than the first (skipped; they were called corrupt)
    other_size_frames: list[int] = field(default_factory=list)
    ended_at: int | None = None  # a video that stopped before frame_count: where (truncated?)


class FrameSource:
    """Iterate the frames of a video file or an image folder; counts corrupt frames it skips."""

    def __init__(self, path: str | os.PathLike[str], fps: float | None = None) -> None:
        self.path = Path(path)
        if fps is not None and not (isinstance(fps, (int, float)) and 0 < fps < math.inf):
            raise ValueError(f"fps must be a positive number of frames a second, got {fps!r}")
        if not self.path.exists():
            raise VideoError(f"no such file or folder: {self.path}")
        if self.path.is_dir():
            self._images = sorted(
                p for p in self.path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES
            )
            if not self._images:
                raise VideoError(f"{self.path}: folder holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
            first = self._first_image()
            self.info = SourceInfo(str(self.path), "images", first.shape[1], first.shape[0],
                                   fps or 30.0, len(self._images))
        else:
            self._images = []
            self.info = self._probe_video(fps)

    def _first_image(self) -> np.ndarray:
        for p in self._images:
            img = cv2.imread(str(p), IMREAD_FLAGS)
            if img is not None:
                return img
        raise VideoError(f"{self.path}: none of its {len(self._images)} images can be read")

    def _probe_video(self, fps: float | None) -> SourceInfo:
        if not os.access(self.path, os.R_OK):
            raise VideoError(f"cannot read {self.path}: permission denied")
        cap = cv2.VideoCapture(str(self.path))
        try:
            ok, first = cap.read() if cap.isOpened() else (False, None)
            if not ok or first is None:
                raise VideoError(f"{self.path}: not a video OpenCV can decode")
            rate = fps or cap.get(cv2.CAP_PROP_FPS) or 30.0
            count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        finally:
            cap.release()
        if not (0 < rate < 10_000):
            rate = 30.0
        return SourceInfo(str(self.path), "video", first.shape[1], first.shape[0], float(rate), count)

    def __iter__(self) -> Iterator[Frame]:
        self.info.corrupt_frames, self.info.other_size_frames = [], []
        if self._images:
            yield from self._iter_images()
        else:
            yield from self._iter_video()

    def _iter_images(self) -> Iterator[Frame]:
        size = (self.info.height, self.info.width)
        for i, p in enumerate(self._images):
            img = cv2.imread(str(p), IMREAD_FLAGS)
            if img is None or img.shape[:2] != size:
                (self.info.corrupt_frames if img is None else self.info.other_size_frames).append(i)
                continue
            yield Frame(i, i / self.info.fps, cv2.cvtColor(img, cv2.COLOR_BGR2RGB))

    def _iter_video(self) -> Iterator[Frame]:
        cap = cv2.VideoCapture(str(self.path))
        size = (self.info.height, self.info.width)
        index, failures = 0, 0
        try:
            while failures < MAX_CONSECUTIVE_FAILURES:
                ok, img = cap.read()
                if not ok or img is None or img.shape[:2] != size:
                    if not self._more_expected(index):
                        break
                    self.info.corrupt_frames.append(index)
                    index, failures = index + 1, failures + 1
                    continue
                failures = 0
                yield Frame(index, index / self.info.fps, cv2.cvtColor(img, cv2.COLOR_BGR2RGB))
                index += 1
        finally:
            cap.release()
        # Trailing failures were the end of the stream, not corrupt frames.
        while self.info.corrupt_frames and self.info.corrupt_frames[-1] >= index - failures:
            self.info.corrupt_frames.pop()
        # Cut short, not finished (containers may overstate their count by a frame or so)
        if failures and self.info.frame_count - (index - failures) > max(1, self.info.frame_count // 100):
            self.info.ended_at = index - failures

    def _more_expected(self, index: int) -> bool:
        return index < self.info.frame_count


def check_rgb(rgb: Any, name: str = "a frame") -> None:
    """``ValueError`` unless ``rgb`` is a non-empty ``(H, W, 3) uint8`` array (what
    :func:`resize` takes): float frames in 0..1 were read as 0..255, other shapes failed inside
    OpenCV."""
    if not (isinstance(rgb, np.ndarray) and rgb.dtype == np.uint8 and rgb.ndim == 3
            and rgb.shape[2] == 3 and rgb.shape[0] > 0 and rgb.shape[1] > 0):
        what = (f"{rgb.dtype} array of shape {rgb.shape}" if isinstance(rgb, np.ndarray)
                else type(rgb).__name__)
        raise ValueError(f"{name} must be an (H, W, 3) uint8 RGB array, got {what}")


def resize(rgb: np.ndarray, config: WeightsConfig) -> np.ndarray:
    """``(H, W, 3) uint8`` → ``(3, h, w) uint8`` at the network's size (bilinear, aspect not kept)."""
    small = cv2.resize(rgb, (config.input_width, config.input_height), interpolation=cv2.INTER_LINEAR)
    return np.ascontiguousarray(small.transpose(2, 0, 1))


def normalize(windows: Tensor, config: WeightsConfig) -> Tensor:
    """``(B, 9, h, w) uint8`` (three RGB frames, oldest first) → normalised float32, same device."""
    return normalizer(config, windows.device)(windows)


def normalizer(config: WeightsConfig, device: torch.device | str) -> Callable[[Tensor], Tensor]:
    """:func:`normalize` with the mean and std already on ``device``. Building them there is a
    blocking copy, which on CUDA waits for all the work queued on the stream; a GPU pipeline
    builds them once."""
    mean = torch.tensor(config.mean, device=device, dtype=torch.float32).repeat(3)[None, :, None, None]
    std = torch.tensor(config.std, device=device, dtype=torch.float32).repeat(3)[None, :, None, None]

    def run(windows: Tensor) -> Tensor:
        return windows.to(torch.float32).div_(255.0).sub_(mean).div_(std)

    return run


def host_to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """A host tensor on ``device``, queued behind the stream's work instead of waiting for it:
    on CUDA it goes through pinned memory, since a copy from pageable memory first drains the
    stream (the host would wait for the GPU's queued work)."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def preprocess(frames: Sequence[np.ndarray], config: WeightsConfig) -> Tensor:
    """Three RGB frames ``(H, W, 3) uint8``, oldest first → one input ``(1, 9, h, w)`` float32.

    Anything else is a ``TypeError`` or ``ValueError`` naming it: float frames in 0..1 were
    normalised as though they were 0..255, and other shapes failed inside OpenCV or torch."""
    if not isinstance(config, WeightsConfig):
        raise TypeError(f"config must be a WeightsConfig (a model's .config), got "
                        f"{type(config).__name__}")
    if isinstance(frames, np.ndarray) or len(frames) != config.frames_in:
        got = f"an array of shape {frames.shape}" if isinstance(frames, np.ndarray) else len(frames)
        raise ValueError(f"preprocess takes a list of {config.frames_in} frames, oldest first; "
                         f"got {got}")
    for k, frame in enumerate(frames):
        check_rgb(frame, f"frame {k}")
    stacked = np.concatenate([resize(f, config) for f in frames], axis=0)
    return normalize(torch.from_numpy(stacked)[None], config)


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM of two grayscale images (Gaussian 11×11 window, σ 1.5, as Wang et al. 2004)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2

    def blur(x: np.ndarray) -> np.ndarray:
        return cv2.GaussianBlur(x, (11, 11), 1.5)

    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a**2
    var_b = blur(b * b) - mu_b**2
    cov = blur(a * b) - mu_a * mu_b
    num = (2 * mu_a * mu_b + c1) * (2 * cov + c2)
    den = (mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2)
    return float((num / den).mean())


class DuplicateFilter:
    """Decides whether a frame repeats the last kept one.

    Exact duplicates always count. With ``ssim_threshold`` set (the published code's filter used
    0.99), near-duplicates count too, compared on 256×144 grayscale copies.
    """

    def __init__(self, ssim_threshold: float | None = None) -> None:
        self.ssim_threshold = ssim_threshold
        self._last: np.ndarray | None = None
        self._last_small: np.ndarray | None = None

    def is_duplicate(self, rgb: np.ndarray) -> bool:
        small = None
        if self.ssim_threshold is not None:
            gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
            small = cv2.resize(gray, (256, 144), interpolation=cv2.INTER_AREA)
        last, last_small = self._last, self._last_small
        duplicate = last is not None and last.shape == rgb.shape and np.array_equal(last, rgb)
        if not duplicate and small is not None and last_small is not None:
            duplicate = ssim(small, last_small) >= float(self.ssim_threshold or 1.0)
        if not duplicate:
            self._last, self._last_small = rgb, small
        return duplicate

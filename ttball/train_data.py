"""Training windows: made by data workers, finished on the training device.

A worker takes a clip (rendered by ``ttball.synth`` or decoded from a labelled video), picks
``windows_per_clip`` random 3-frame windows from its ground truth alone (start, temporal
reversal, horizontal flip, crop, brightness/contrast jitter; the random draws are those of the
first implementation, in its order), then renders and resizes only the frames those windows
use, one at a time. What travels to the main process per window is small (``Window``): the
uint8 pixels, a 256-entry lookup table for the jitter, and ten numbers per frame for its
target. ``to_device`` applies the table while normalising, and draws the targets, on the
training device. The windows are those of the first implementation bit for bit, the targets
equal to float32 rounding (``tests/test_train_data.py``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import cv2
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from ttball.errors import UserError, VideoError
from ttball.hostmem import available_memory, format_bytes
from ttball.model.config import WeightsConfig
from ttball.results import read_track_csv
from ttball.train_targets import build_targets, capsule, peak_pixels, target_params

if TYPE_CHECKING:
    from ttball.train import TrainConfig

SYNTH_SIZES = ((1280, 720), (960, 540), (640, 360), (1920, 1080))
# Batches each worker may have ready. Workers deliver in turn (that keeps the stream
# deterministic), so one busy with a 1080p clip holds up the rest; a simulation of that queue
# with the measured clip times (docs/training.md, "Data throughput") gives 73 % of the
# workers' rate at 14 workers and 67 % at 29 with 4, 87 % and 82 % with 8.
PREFETCH = 8
IDENTITY_LUT = np.arange(256, dtype=np.uint8)
# A window's bytes beside its pixels: the jitter table and its numbers (``Window``).
WINDOW_EXTRA_BYTES = 256 + 3 * 10 * 4 + 3 * 4 + 3 * 8


class Window(NamedTuple):
    """One training window as a worker sends it (batched by the loader: a leading B axis)."""

    x: Tensor  # (9, h, w) uint8: three RGB frames, oldest first, not yet jittered
    lut: Tensor  # (256,) uint8: the brightness/contrast jitter as a lookup table
    targets: Tensor  # (3, 10) float32: target_params of the three frames (whole frame)
    where: Tensor  # (3,) int32: top, left of the crop, 1 if the frames were flipped
    cost: Tensor  # (3,) float64 worker seconds: CPU, wall inside the worker, wall waiting


@dataclass(frozen=True)
class WindowSpec:
    """A window chosen from the ground truth alone, before any pixel exists."""

    start: int
    reverse: bool
    flip: bool
    top: int
    left: int
    lut: np.ndarray


@dataclass
class ClipSource:
    """A clip's targets (``params`` (N, 10), network-size frames) and a way to get its frames:
    ``render(boxes, out)`` writes RGB network-size frames ``out[i]``, exact at least inside
    ``boxes[i]`` (x0, y0, x1, y1, network pixels), for each frame whose box is not empty."""

    params: np.ndarray
    render: Callable[[np.ndarray, np.ndarray], None]


def labelled_clips(folders: tuple[str, ...]) -> list[tuple[Path, Path]]:
    """(video, csv) pairs: every ``NAME.csv`` beside a ``NAME.mp4/avi/mov/mkv`` in the folders,
    each checked (``check_clip``) here, before any worker starts: a clip no worker can use is a
    one-line error naming it, not a run that trains on less (or, with nothing else, spins). A
    folder ``ttball synth`` wrote (its manifest, or the file a cut-short replacement leaves)
    must hold every clip its manifest lists (``read_manifest``)."""
    from ttball.synth.dataset import MANIFEST, REPLACING, read_manifest

    pairs = []
    for folder in folders:
        root = Path(folder)
        if not root.is_dir():
            raise UserError(f"--clips {folder}: not a folder")
        if (root / MANIFEST).is_file() or (root / REPLACING).exists():
            read_manifest(root)  # a `ttball synth` data set: every clip it lists, or one line
        for csv_path in sorted(root.glob("*.csv")):
            for ext in (".mp4", ".avi", ".mov", ".mkv"):
                video = csv_path.with_suffix(ext)
                if video.exists():
                    pairs.append((video, csv_path))
                    break
    if folders and not pairs:
        raise UserError(f"no labelled clips (VIDEO + CSV of the same name) in {', '.join(folders)}")
    for video, csv_path in pairs:
        check_clip(video, csv_path)
    return pairs


def check_clip(video: Path, csv_path: Path) -> None:
    """A one-line error unless ``video`` decodes and it and its labels hold a window (3
    frames). Cheap: the first frame and the container's count; a file cut short after that is
    caught when a worker decodes it (``_labelled_source``)."""
    from ttball.frames import FrameSource

    try:
        declared = FrameSource(video).info.frame_count
    except VideoError as exc:
        raise VideoError(f"--clips: {exc}") from None
    if 0 < declared < 3:
        raise VideoError(f"--clips: {video}: {declared} frames; a training window needs 3")
    rows = len(read_track_csv(csv_path))
    if rows < 3:
        raise UserError(f"--clips: {csv_path}: {rows} labelled frames; a training window needs 3")


def check_crop(crop: tuple[int, int], height: int, width: int) -> None:
    """A one-line error unless crops of ``crop`` (h, w) fit the network (multiples of its stride
    8, at least 16: ``WindowStream._crop_at`` keeps the ball 8 px inside) and can be cut from
    frames of ``height`` x ``width``."""
    h, w = crop
    if h % 8 or w % 8 or h < 16 or w < 16 or h > height or w > width:
        raise UserError(f"--crop {h}x{w}: sides must be multiples of 8 from 16 up to the "
                        f"{height}x{width} frames that training crops are cut from")


def check_memory(cfg: TrainConfig) -> None:
    """A one-line error when the batches can't fit in memory. A lower bound: each worker (or
    this process, without workers) holds a batch's windows and their collated copy at once, and
    this process the batch it trains on; the same for the whole-frame batches."""
    check_crop(cfg.crop, cfg.height, cfg.width)
    at_once = max(cfg.workers, 1) + 1
    window = 9 * cfg.crop[0] * cfg.crop[1] + WINDOW_EXTRA_BYTES
    memory = at_once * cfg.batch * window
    if cfg.full_frame_every:
        frame_workers = (cfg.workers + 3) // 4
        memory += ((max(frame_workers, 1) + 1) * max(cfg.batch // 4, 1)
                   * (9 * cfg.height * cfg.width + WINDOW_EXTRA_BYTES))
    available = available_memory()
    if available is not None and memory > available:
        raise UserError(
            f"--batch {cfg.batch} needs at least {format_bytes(memory)} of memory for its "
            f"windows ({at_once} batches at once of {cfg.crop[0]}x{cfg.crop[1]} crops, "
            f"{format_bytes(window)} each{', and whole frames' if cfg.full_frame_every else ''}); {format_bytes(available)} "
            "is available: ask for a smaller --batch or --crop, or fewer --workers"
        )


def _to_net(frame_bgr: np.ndarray, net_size: tuple[int, int]) -> np.ndarray:
    small = cv2.resize(frame_bgr, net_size, interpolation=cv2.INTER_LINEAR)
    return cv2.cvtColor(small, cv2.COLOR_BGR2RGB)


def _labelled_source(video: Path, csv_path: Path, net_size: tuple[int, int]) -> ClipSource:
    """Decodes the whole video now (its length fixes the windows), keeping network-size frames."""
    cap = cv2.VideoCapture(str(video))
    frames, src = [], net_size
    while True:
        ok, img = cap.read()
        if not ok:
            break
        src = (img.shape[1], img.shape[0])
        frames.append(_to_net(img, net_size))
    cap.release()
    rows = read_track_csv(csv_path)
    n = min(len(frames), len(rows))
    if n < 3:  # the stream would skip it, and spin when no other clip is left
        raise VideoError(f"--clips: {video}: {len(frames)} frames could be decoded, "
                         f"{len(rows)} labelled (a truncated file?); a training window needs 3")

    def render(boxes: np.ndarray, out: np.ndarray) -> None:
        for i in np.flatnonzero(boxes[:, 2] > boxes[:, 0]):
            out[i] = frames[i]

    return ClipSource(target_params(rows[:n], src, net_size), render)


def _synth_source(seed: int, size: tuple[int, int], frames: int, net_size: tuple[int, int]) -> ClipSource:
    from ttball.synth import ClipConfig, plan_clip

    plan = plan_clip(seed, ClipConfig(size=size, frames=frames))

    def render(boxes: np.ndarray, out: np.ndarray) -> None:
        wanted = boxes[:, 2] > boxes[:, 0]
        regions = [_source_box(b, size, net_size) for b in boxes]
        for i, img in zip(np.flatnonzero(wanted), plan.frames(wanted, regions)):
            out[i] = _to_net(img, net_size)

    return ClipSource(target_params(plan.rows, size, net_size), render)


def _source_box(box: np.ndarray, src: tuple[int, int], net: tuple[int, int]) -> tuple[int, int, int, int]:
    """The source pixels that a bilinear resize to ``net`` reads for the network pixels in
    ``box`` (x0, y0, x1, y1); sizes are (width, height). Output pixel j samples source
    (j + 0.5) * scale - 0.5 and its right neighbour: one pixel more each side for rounding."""
    (sw, sh), (nw, nh) = src, net
    sx, sy = sw / nw, sh / nh
    x0, y0, x1, y1 = (int(v) for v in box)
    return (
        max(math.floor((x0 + 0.5) * sx - 0.5) - 1, 0),
        max(math.floor((y0 + 0.5) * sy - 0.5) - 1, 0),
        min(math.floor((x1 - 0.5) * sx - 0.5) + 3, sw),
        min(math.floor((y1 - 0.5) * sy - 0.5) + 3, sh),
    )


def jitter_lut(rng: np.random.Generator) -> np.ndarray:
    """The same brightness/contrast change for all three frames, as a table over uint8 values
    (what ``clip(x * gain + bias, 0, 255)`` makes of each value, in float64 as NumPy did)."""
    if rng.random() < 0.2:
        return IDENTITY_LUT
    gain, bias = rng.uniform(0.7, 1.3), rng.uniform(-25, 25)
    return np.clip(IDENTITY_LUT.astype(np.float32) * gain + bias, 0, 255).astype(np.uint8)


class WindowStream(IterableDataset):
    """Endless training windows (``Window``), ``crop`` (h, w) or whole frames when None."""

    def __init__(self, cfg: TrainConfig, crop: tuple[int, int] | None) -> None:
        self.cfg = cfg
        self.crop = crop
        if crop:
            check_crop(crop, cfg.height, cfg.width)
        if cfg.synth and cfg.synth_frames < 3:
            raise UserError(f"--synth-frames must be at least 3 (a window), got {cfg.synth_frames}")
        self.labelled = labelled_clips(cfg.clips)
        self.net_size = (cfg.width, cfg.height)
        if not cfg.synth and not self.labelled:
            raise UserError("nothing to train on: give --clips or leave synthetic clips on")

    def _clip(self, rng: np.random.Generator, counter: int) -> ClipSource:
        from ttball.synth import clip_seed

        use_labelled = self.labelled and (not self.cfg.synth or rng.random() < 0.5)
        if use_labelled:
            video, csv_path = self.labelled[int(rng.integers(len(self.labelled)))]
            return _labelled_source(video, csv_path, self.net_size)
        size = SYNTH_SIZES[int(rng.integers(len(SYNTH_SIZES)))]
        seed = clip_seed(self.cfg.synth_seed, counter)
        return _synth_source(seed, size, self.cfg.synth_frames, self.net_size)

    def __iter__(self) -> Iterator[Window]:
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        rng = np.random.default_rng([self.cfg.seed, wid, 0 if self.crop else 1])
        counter = wid
        if cv2.getNumThreads() != 1:  # (forked by ``loader``: already 1, and left alone)
            cv2.setNumThreads(1)
        buffer = np.empty((0,), np.uint8)
        waited = 0.0
        while True:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            clip = self._clip(rng, counter)
            counter += nw
            n = len(clip.params)  # 3 or more: checked in __init__ and _labelled_source
            visible = np.flatnonzero([p[0] > 0 and capsule(p).max() > 0.5 for p in clip.params])
            specs = [self._spec(rng, clip.params, visible) for _ in range(self.cfg.windows_per_clip)]
            shape = (n, self.cfg.height, self.cfg.width, 3)
            if buffer.shape != shape:
                buffer = np.empty(shape, np.uint8)  # reused: windows are copies
            clip.render(self._boxes(specs, n), buffer)
            share = np.array([time.process_time() - cpu0, time.perf_counter() - wall0]) / len(specs)
            for s in specs:
                cpu0, wall0 = time.process_time(), time.perf_counter()
                x, targets = self._cut(buffer, clip.params, s)
                cpu, wall = share + (time.process_time() - cpu0, time.perf_counter() - wall0)
                window = Window(
                    torch.from_numpy(x),
                    torch.from_numpy(s.lut),
                    torch.from_numpy(targets),
                    torch.tensor((s.top, s.left, int(s.flip)), dtype=torch.int32),
                    torch.tensor((cpu, wall, waited), dtype=torch.float64),
                )
                out = time.perf_counter()
                yield window
                # Outside this generator: collation, queueing, and waiting to be asked for more.
                waited = time.perf_counter() - out

    def _spec(self, rng: np.random.Generator, params: np.ndarray, visible: np.ndarray) -> WindowSpec:
        n = len(params)
        # Prefer windows whose frames hold the ball (3 in 4), like a rally-focused sampler.
        if len(visible) and rng.random() < 0.75:
            start = int(np.clip(rng.choice(visible) - rng.integers(0, 3), 0, n - 3))
        else:
            start = int(rng.integers(0, n - 2))
        reverse, flip = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        top = left = 0
        if self.crop:
            top, left = self._crop_at(rng, params[start + 1], flip)
        return WindowSpec(start, reverse, flip, top, left, jitter_lut(rng))

    def _crop_at(self, rng: np.random.Generator, middle: np.ndarray, flip: bool) -> tuple[int, int]:
        """Top-left of a crop; 4 in 5 hold a peak pixel of the middle frame's target."""
        ch, cw = self.crop  # type: ignore[misc]
        h, w = self.cfg.height, self.cfg.width
        peak = peak_pixels(middle, w, flip)
        if len(peak) and rng.random() < 0.8:
            cy, cx = peak[int(rng.integers(len(peak)))]
            # the peak 8 px or more inside the crop; a 16 px side has one place for it
            top = int(np.clip(cy - rng.integers(8, max(ch - 8, 9)), 0, h - ch))
            left = int(np.clip(cx - rng.integers(8, max(cw - 8, 9)), 0, w - cw))
            return top, left
        return int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))

    def _boxes(self, specs: list[WindowSpec], n: int) -> np.ndarray:
        """``(n, 4)`` (x0, y0, x1, y1): per frame, the box around all its windows' crops in the
        unflipped frame (network pixels); empty for a frame no window uses."""
        h, w = self.cfg.height, self.cfg.width
        ch, cw = self.crop or (h, w)
        boxes = np.zeros((n, 4), np.int64)
        for s in specs:
            x0 = w - s.left - cw if s.flip else s.left
            box = np.array((x0, s.top, x0 + cw, s.top + ch))
            for f in range(s.start, s.start + 3):
                used = boxes[f, 2] > boxes[f, 0]
                boxes[f] = np.r_[np.minimum(boxes[f, :2], box[:2]), np.maximum(boxes[f, 2:], box[2:])] if used else box
        return boxes

    def _cut(self, frames: np.ndarray, params: np.ndarray, s: WindowSpec) -> tuple[np.ndarray, np.ndarray]:
        """``frames`` (N, H, W, 3) → x (9, h, w) uint8 and the window's (3, 10) target params."""
        x = frames[s.start : s.start + 3]
        p = params[s.start : s.start + 3]
        if s.reverse:
            x, p = x[::-1], p[::-1]
        if s.flip:
            x = x[:, :, ::-1]
        if self.crop:
            ch, cw = self.crop
            x = x[:, s.top : s.top + ch, s.left : s.left + cw]
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        return x.reshape(9, *x.shape[2:]), np.ascontiguousarray(p)


def loader(cfg: TrainConfig, crop: tuple[int, int] | None, batch: int, workers: int) -> Iterator[Window]:
    """Batches of windows; pinned when CUDA is there (pinned memory is what copies without
    blocking)."""
    batches = DataLoader(
        WindowStream(cfg, crop), batch_size=batch, num_workers=workers,
        pin_memory=torch.cuda.is_available(), persistent_workers=workers > 0,
        prefetch_factor=PREFETCH if workers else None,
    )
    with _no_cv2_pool():  # the workers are forked here
        started = iter(batches)
    return _one_line_errors(started)


@contextmanager
def _no_cv2_pool() -> Iterator[None]:
    """OpenCV at one thread around a fork: a child inherits the pool's locks but not its threads,
    so its own ``cv2.setNumThreads(1)`` (``WindowStream``) waited forever on them whenever this
    process had resized or decoded with the pool before (a hung ``train``). Set here, in the
    parent, the children inherit 1 and need not touch the pool."""
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # what the children inherit; they leave it as it is
    try:
        yield
    finally:
        cv2.setNumThreads(threads)


def _one_line_errors(batches: Iterator[Window]) -> Iterator[Window]:
    """``batches``, with a ``UserError`` raised in a data worker re-raised as its own one line:
    the DataLoader re-raises it with the worker's whole traceback as the message."""
    try:
        yield from batches
    except UserError as exc:
        cls, lines = type(exc), str(exc).rstrip().splitlines()
        prefix = f"{cls.__module__}.{cls.__qualname__}: "  # the traceback's last line
        if len(lines) > 1 and lines[-1].startswith(prefix):
            raise cls(lines[-1][len(prefix):]) from None
        raise


def to_device(batch: Window, config: WeightsConfig, device: torch.device) -> tuple[Tensor, Tensor]:
    """A batch → model input ``(B, 9, h, w)`` float32 (jittered, normalised) and targets
    ``(B, 3, h, w)`` float32, made on ``device`` from the batch's uint8 pixels and numbers.

    Nothing here waits for the device: every copy to it is asynchronous.
    """
    from ttball.frames import host_to_device, normalize

    b, c = batch.x.shape[:2]
    # normalize() of each window's 256 jittered values, per channel (on the host: 295 KB for 32
    # windows); one gather on the device then jitters and normalises.
    table = normalize(batch.lut[:, None, None, :].expand(b, c, 1, 256), config).reshape(-1)
    # Pinned on CUDA: from pageable memory this table kept the host from queueing a step ahead,
    # and the step profile counted the GPU's time as "host" (docs/training.md, runs 4 and 5).
    table = host_to_device(table, device)
    offset = torch.arange(b * c, device=device).view(b, c, 1, 1) * 256
    x = table[batch.x.to(device, non_blocking=True).long() + offset]
    params = batch.targets.to(device, non_blocking=True)
    where = batch.where.to(device, non_blocking=True)
    return x, build_targets(params, where, (x.shape[2], x.shape[3]), config.input_width)

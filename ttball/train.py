"""Training BlurBall on synthetic rallies (``ttball.synth``) and/or labelled clips.

Data: each worker renders (or decodes) a clip, resizes its frames to the network's size, draws
one target heatmap per frame, then cuts ``windows_per_clip`` random 3-frame windows from it,
each a random crop (``crop``; the network is fully convolutional) with a random horizontal flip,
temporal reversal and brightness/contrast jitter. Targets follow the blur: a Gaussian "capsule"
along the streak whose 0.5 contour has the streak's half-length, so post-processing reads the
ground-truth blur length and angle back from a perfect prediction.

Loss: the weighted binary cross-entropy of TrackNetV2/WASB,
``-(1-p)^2 y log p - p^2 (1-y) log(1-p)``, which keeps the rare ball pixels from drowning.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from ttball.errors import UserError
from ttball.model import BlurBall, load_model, save_checkpoint
from ttball.model.config import WeightsConfig
from ttball.results import FrameResult, read_track_csv

TARGET_SIGMA = 1.5  # heatmap px; the 0.5 contour sits at sigma * sqrt(2 ln 2) = 1.77 px
SYNTH_SIZES = ((1280, 720), (960, 540), (640, 360), (1920, 1080))


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (saved beside its checkpoints)."""

    out: str = "runs/train"
    steps: int = 4000
    batch: int = 16
    lr: float = 2e-3
    weight_decay: float = 1e-4
    warmup_steps: int = 200
    crop: tuple[int, int] = (144, 256)  # (h, w) of training crops; multiples of 8
    full_frame_every: int = 4  # every Nth batch uses whole frames (the SE blocks see full images)
    windows_per_clip: int = 48
    synth_seed: int = 1
    synth_frames: int = 120
    clips: tuple[str, ...] = ()  # folders of labelled clips (video + CSV of the same name)
    synth: bool = True
    workers: int = 4
    seed: int = 0
    amp: bool = True
    max_minutes: float = 0.0  # 0: no limit
    checkpoint_every: int = 500
    init: str | None = None  # fine-tune from these weights
    height: int = 288
    width: int = 512
    extra: dict[str, Any] = field(default_factory=dict)


def draw_target(rows: list[FrameResult], src_size: tuple[int, int], net_size: tuple[int, int]) -> np.ndarray:
    """Target heatmaps ``(N, h, w)`` float32 in [0, 1] for rows of one clip.

    ``src_size`` and ``net_size`` are (width, height).
    """
    sw, sh = src_size
    w, h = net_size
    sx, sy = w / sw, h / sh
    out = np.zeros((len(rows), h, w), np.float32)
    core = TARGET_SIGMA * math.sqrt(2 * math.log(2))
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    for i, r in enumerate(rows):
        if not r.visible:
            continue
        u, v = (r.x + 0.5) * sx - 0.5, (r.y + 0.5) * sy - 0.5
        t = math.radians(r.blur_angle_deg)
        dx, dy = math.cos(t) * sx, math.sin(t) * sy
        norm = math.hypot(dx, dy)
        dx, dy = dx / norm, dy / norm
        half = max(r.blur_length_px * norm - core, 0.0)
        x0, x1 = int(max(u - half - 8, 0)), int(min(u + half + 9, w))
        y0, y1 = int(max(v - half - 8, 0)), int(min(v + half + 9, h))
        if x0 >= x1 or y0 >= y1:
            continue
        px, py = xs[y0:y1, x0:x1] - u, ys[y0:y1, x0:x1] - v
        along = np.clip(px * dx + py * dy, -half, half)
        d2 = (px - along * dx) ** 2 + (py - along * dy) ** 2
        out[i, y0:y1, x0:x1] = np.exp(-d2 / (2 * TARGET_SIGMA**2))
    return out


def prepare_clip(frames_bgr: list[np.ndarray], rows: list[FrameResult], net_size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Frames → ``(N, 3, h, w)`` uint8 RGB at the network's size, and ``(N, h, w)`` targets."""
    w, h = net_size
    src = (frames_bgr[0].shape[1], frames_bgr[0].shape[0])
    small = np.stack(
        [cv2.cvtColor(cv2.resize(f, (w, h), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)
         for f in frames_bgr]
    ).transpose(0, 3, 1, 2)
    return np.ascontiguousarray(small), draw_target(rows, src, net_size)


def labelled_clips(folders: tuple[str, ...]) -> list[tuple[Path, Path]]:
    """(video, csv) pairs: every ``NAME.csv`` beside a ``NAME.mp4/avi/mov/mkv`` in the folders."""
    pairs = []
    for folder in folders:
        root = Path(folder)
        if not root.is_dir():
            raise UserError(f"--clips {folder}: not a folder")
        for csv_path in sorted(root.glob("*.csv")):
            for ext in (".mp4", ".avi", ".mov", ".mkv"):
                video = csv_path.with_suffix(ext)
                if video.exists():
                    pairs.append((video, csv_path))
                    break
    if folders and not pairs:
        raise UserError(f"no labelled clips (VIDEO + CSV of the same name) in {', '.join(folders)}")
    return pairs


def _read_video(path: Path) -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, img = cap.read()
        if not ok:
            break
        frames.append(img)
    cap.release()
    return frames


class WindowStream(IterableDataset):
    """Endless training windows: ``(x (9, h, w) uint8, y (3, h, w) float32)``."""

    def __init__(self, cfg: TrainConfig, crop: tuple[int, int] | None) -> None:
        self.cfg = cfg
        self.crop = crop
        self.labelled = labelled_clips(cfg.clips)
        if not cfg.synth and not self.labelled:
            raise UserError("nothing to train on: give --clips or leave synthetic clips on")

    def _clip(self, rng: np.random.Generator, counter: int) -> tuple[np.ndarray, np.ndarray]:
        from ttball.synth import ClipConfig, clip_seed, generate_clip

        use_labelled = self.labelled and (not self.cfg.synth or rng.random() < 0.5)
        if use_labelled:
            video, csv_path = self.labelled[int(rng.integers(len(self.labelled)))]
            frames, rows = _read_video(video), read_track_csv(csv_path)
            n = min(len(frames), len(rows))
            frames, rows = frames[:n], rows[:n]
        else:
            size = SYNTH_SIZES[int(rng.integers(len(SYNTH_SIZES)))]
            it, rows = generate_clip(
                clip_seed(self.cfg.synth_seed, counter),
                ClipConfig(size=size, frames=self.cfg.synth_frames),
            )
            frames = list(it)
        return prepare_clip(frames, rows, (self.cfg.width, self.cfg.height))

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        rng = np.random.default_rng([self.cfg.seed, wid, 0 if self.crop else 1])
        counter = wid
        cv2.setNumThreads(1)
        while True:
            frames, targets = self._clip(rng, counter)
            counter += nw
            if len(frames) < 3:
                continue
            for _ in range(self.cfg.windows_per_clip):
                yield self._window(rng, frames, targets)

    def _window(self, rng: np.random.Generator, frames: np.ndarray, targets: np.ndarray) -> tuple[Tensor, Tensor]:
        n = len(frames)
        # Prefer windows whose frames hold the ball (3 in 4), like a rally-focused sampler.
        visible = np.flatnonzero(targets.reshape(n, -1).max(axis=1) > 0.5)
        if len(visible) and rng.random() < 0.75:
            start = int(np.clip(rng.choice(visible) - rng.integers(0, 3), 0, n - 3))
        else:
            start = int(rng.integers(0, n - 2))
        x = frames[start : start + 3]
        y = targets[start : start + 3]
        if rng.random() < 0.5:
            x, y = x[::-1], y[::-1]
        if rng.random() < 0.5:
            x, y = x[..., ::-1], y[..., ::-1]
        if self.crop:
            x, y = self._crop(rng, x, y)
        x = _jitter(rng, np.ascontiguousarray(x))
        return torch.from_numpy(x.reshape(9, *x.shape[2:])), torch.from_numpy(np.ascontiguousarray(y))

    def _crop(self, rng: np.random.Generator, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ch, cw = self.crop  # type: ignore[misc]
        h, w = y.shape[1:]
        peak = np.argwhere(y[1] > 0.5)
        if len(peak) and rng.random() < 0.8:
            cy, cx = peak[int(rng.integers(len(peak)))]
            top = int(np.clip(cy - rng.integers(8, ch - 8), 0, h - ch))
            left = int(np.clip(cx - rng.integers(8, cw - 8), 0, w - cw))
        else:
            top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        return x[:, :, top : top + ch, left : left + cw], y[:, top : top + ch, left : left + cw]


def _jitter(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """Same brightness/contrast change on all three frames (uint8 in, uint8 out)."""
    if rng.random() < 0.2:
        return x
    gain, bias = rng.uniform(0.7, 1.3), rng.uniform(-25, 25)
    return np.clip(x.astype(np.float32) * gain + bias, 0, 255).astype(np.uint8)


def focal_wbce(logits: Tensor, target: Tensor) -> Tensor:
    """``-(1-p)^2 y log p - p^2 (1-y) log(1-p)``, averaged; computed stably from logits."""
    p = torch.sigmoid(logits)
    log_p = torch.nn.functional.logsigmoid(logits)
    log_not_p = torch.nn.functional.logsigmoid(-logits)
    loss = -((1 - p) ** 2 * target * log_p + p**2 * (1 - target) * log_not_p)
    return loss.mean()


def _normalize(x: Tensor, config: WeightsConfig) -> Tensor:
    from ttball.frames import normalize

    return normalize(x, config)


def _lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(cfg.steps - cfg.warmup_steps, 1)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def _loader(cfg: TrainConfig, crop: tuple[int, int] | None, batch: int, workers: int) -> Iterator[tuple[Tensor, Tensor]]:
    ds = WindowStream(cfg, crop)
    loader = DataLoader(
        ds, batch_size=batch, num_workers=workers, pin_memory=torch.cuda.is_available(),
        persistent_workers=workers > 0, prefetch_factor=4 if workers else None,
    )
    return iter(loader)


def _state_path(out: Path) -> Path:
    return out / "last.pt"


def train(cfg: TrainConfig, device: str = "auto", progress: bool = True) -> dict[str, Any]:
    """Train (or resume from ``cfg.out/last.pt``); returns a summary with the loss curve."""
    from tqdm import tqdm

    from ttball.backends import resolve_device

    dev = resolve_device(device)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    model = load_model(cfg.init) if cfg.init else BlurBall()
    model = model.to(dev).train()
    if dev.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
        torch.backends.cudnn.benchmark = True
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    step, history = 0, []
    if _state_path(out).exists():
        state = torch.load(_state_path(out), map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, history = int(state["step"]), list(state["history"])
    config = WeightsConfig(name="ttball-synth", input_height=cfg.height, input_width=cfg.width)
    crops = _loader(cfg, cfg.crop, cfg.batch, cfg.workers)
    fulls = None
    if cfg.full_frame_every:
        fulls = _loader(cfg, None, max(cfg.batch // 4, 1), (cfg.workers + 3) // 4)
    amp = cfg.amp and dev.type == "cuda"
    started, seen, ema = time.perf_counter(), 0, None
    half_warm = (step, started)
    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, unit="step", dynamic_ncols=True)
    while step < cfg.steps:
        if cfg.max_minutes and time.perf_counter() - started > 60 * cfg.max_minutes:
            break
        source = fulls if fulls is not None and step % cfg.full_frame_every == cfg.full_frame_every - 1 else crops
        x, y = next(source)
        x = _normalize(x.to(dev, non_blocking=True), config)
        y = y.to(dev, non_blocking=True)
        if dev.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(x)[0]
        loss = focal_wbce(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        step += 1
        seen += x.shape[0]
        if step == cfg.warmup_steps // 2:
            half_warm = (step, time.perf_counter())
        if cfg.max_minutes and step == cfg.warmup_steps:
            cfg = _fit_to_budget(cfg, step, half_warm, time.perf_counter() - started)
            bar.total = cfg.steps
        value = float(loss.detach())
        ema = value if ema is None else 0.98 * ema + 0.02 * value
        if step % 50 == 0 or step == cfg.steps:
            history.append({"step": step, "loss": round(ema, 6), "lr": _lr_at(step, cfg)})
        elapsed = time.perf_counter() - started
        bar.set_postfix(loss=f"{ema:.4f}", win_s=f"{seen / max(elapsed, 1e-9):.0f}")
        bar.update(1)
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            _checkpoint(out, model, opt, step, history, config, cfg)
    bar.close()
    _checkpoint(out, model, opt, step, history, config, cfg)
    elapsed = time.perf_counter() - started
    return {"steps": step, "planned_steps": cfg.steps, "seconds": elapsed, "windows": seen,
            "windows_per_s": seen / max(elapsed, 1e-9), "loss": ema, "history": history,
            "weights": str(out / "weights.safetensors")}


def _fit_to_budget(
    cfg: TrainConfig, step: int, half_warm: tuple[int, float], elapsed: float
) -> TrainConfig:
    """After warm-up, cut ``steps`` to what fits in ``max_minutes`` at the rate seen so far.

    The cosine schedule then runs over the final step count, so ``--steps N`` with the N this
    picks reproduces the run's schedule exactly (the warm-up does not depend on ``steps``).
    """
    # The rate over the second half of warm-up: the first steps wait for data workers to start.
    rate = (step - half_warm[0]) / max(time.perf_counter() - half_warm[1], 1e-9)
    fits = step + int(0.97 * rate * (60 * cfg.max_minutes - elapsed))
    return replace(cfg, steps=max(step, min(cfg.steps, fits)))


def _checkpoint(out: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int,
                history: list[dict[str, Any]], config: WeightsConfig, cfg: TrainConfig) -> None:
    model.eval()
    save_checkpoint(out / "weights.safetensors", model,
                    config.evolve(source=f"ttball train, {step} steps", metrics={"train": asdict(cfg)}))
    model.train()
    tmp = _state_path(out).with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                "history": history}, tmp)
    os.replace(tmp, _state_path(out))

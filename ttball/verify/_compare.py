"""One clip through the reference and every candidate on the same windows.

Each clip is decoded once; one :class:`~ttball.stream.FrameStream` per backend sees the same
frames, so all of them cut the same windows; the reference's windows are normalised once and
that same batch goes to every backend. Each backend's probabilities go back into its own stream
(and tracker), exactly as ``ttball track`` would do with it. Beside that, every heatmap the
stream uses (step 3: each kept frame once; step 1: up to three per frame) is compared:
logits and probabilities, the peak pixel, and the best :func:`~ttball.postprocess.detect`
candidate of each backend.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
import torch

from ttball.backends import Backend
from ttball.errors import VideoError
from ttball.evaluate import Tally, tally_frames
from ttball.frames import Frame, FrameSource, normalize
from ttball.model.config import WeightsConfig
from ttball.postprocess import Detection, FrameGeometry, detect
from ttball.results import FrameResult
from ttball.stream import FrameStream, StreamOptions, Window
from ttball.verify._inputs import Clip

MIN_FRAMES = 3


@dataclass(frozen=True)
class FramePair:
    """One heatmap both backends produced: frame ``frame`` (source index) of ``clip``, at
    ``position`` (0 oldest) of window ``window``; each side's best candidate or None."""

    clip: str
    frame: int
    window: int
    position: int
    ref: Detection | None
    cand: Detection | None
    peak_moved: bool
    with_ball: bool  # either side's maximum is above the threshold

    @property
    def flip(self) -> bool:
        return (self.ref is None) != (self.cand is None)

    @property
    def distance(self) -> float | None:
        if self.ref is None or self.cand is None:
            return None
        return math.hypot(self.cand.x - self.ref.x, self.cand.y - self.ref.y)

    @property
    def severity(self) -> float:
        """Flips first (by score), then position differences; 0 when there is nothing to see."""
        if self.flip:
            return 1e9 + max(d.score for d in (self.ref, self.cand) if d is not None)
        return self.distance or 0.0


def _differences(ref: np.ndarray, cand: np.ndarray) -> tuple[float, float, float]:
    """max |cand − ref|, Σ(cand − ref)², Σref². Float32 with BLAS dot products: 1.0 ms per
    288×512 window where float64 copies took 4.8 (dev CPU), and it is paid per candidate; the
    sums agree with float64 to 1e-6 relative."""
    diff = (cand - ref).ravel()
    flat = ref.ravel()
    return float(np.abs(diff).max()), float(np.dot(diff, diff)), float(np.dot(flat, flat))


@dataclass
class HeatmapStats:
    """Agreement of the raw outputs over many heatmaps; ``+=`` pools clips."""

    heatmaps: int = 0
    nonfinite: int = 0  # candidate heatmaps holding NaN or inf
    logit_max_abs: float = 0.0
    prob_max_abs: float = 0.0
    logit_sq_diff: float = 0.0
    logit_sq_ref: float = 0.0
    prob_sq_diff: float = 0.0
    prob_sq_ref: float = 0.0
    peak_moved: int = 0
    peak_moved_with_ball: int = 0
    with_ball: int = 0

    def add(
        self,
        ref_logits: np.ndarray,
        cand_logits: np.ndarray,
        ref_probs: np.ndarray,
        cand_probs: np.ndarray,
    ) -> None:
        """Heatmaps ``(n, h, w)`` float32 of both sides (logits and probabilities)."""
        finite = np.isfinite(cand_logits).all(axis=(1, 2))
        self.heatmaps += len(ref_logits)
        self.nonfinite += int((~finite).sum())
        if not finite.any():
            return
        top, sq_diff, sq_ref = _differences(ref_logits[finite], cand_logits[finite])
        self.logit_max_abs = max(self.logit_max_abs, top)
        self.logit_sq_diff += sq_diff
        self.logit_sq_ref += sq_ref
        top, sq_diff, sq_ref = _differences(ref_probs[finite], cand_probs[finite])
        self.prob_max_abs = max(self.prob_max_abs, top)
        self.prob_sq_diff += sq_diff
        self.prob_sq_ref += sq_ref

    def __iadd__(self, other: HeatmapStats) -> Self:
        for name in self.__dataclass_fields__:
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, max(mine, theirs) if name.endswith("max_abs") else mine + theirs)
        return self

    def summary(self) -> dict[str, Any]:
        def rel(diff: float, ref: float) -> float | None:
            return math.sqrt(diff / ref) if ref > 0 else None

        return {
            "heatmaps": self.heatmaps,
            "nonfinite": self.nonfinite,
            "logit_max_abs": self.logit_max_abs,
            "logit_rel": rel(self.logit_sq_diff, self.logit_sq_ref),
            "prob_max_abs": self.prob_max_abs,
            "prob_rel": rel(self.prob_sq_diff, self.prob_sq_ref),
            "peak_moved": self.peak_moved,
            "peak_moved_with_ball": self.peak_moved_with_ball,
            "with_ball": self.with_ball,
        }


@dataclass
class Keeper:
    """What a worst-frame picture needs: the network-size RGB frame ``(3, h, w)`` uint8 and both
    probability maps ``(h, w)`` float16."""

    pair: FramePair
    rgb: np.ndarray
    ref_prob: np.ndarray
    cand_prob: np.ndarray
    geometry: FrameGeometry


@dataclass
class ClipResult:
    """One candidate on one clip."""

    clip: Clip
    stats: HeatmapStats = field(default_factory=HeatmapStats)
    pairs: list[FramePair] = field(default_factory=list)
    ref_rows: list[FrameResult] = field(default_factory=list)
    cand_rows: list[FrameResult] = field(default_factory=list)
    ref_tally: Tally | None = None
    cand_tally: Tally | None = None
    keepers: list[tuple[float, int, Keeper]] = field(default_factory=list)  # a min-heap
    source: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=lambda: {"reference": 0.0, "candidate": 0.0})
    error: str | None = None


@contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """TF32 for CUDA convolutions and matmuls on or off for the block (restored after)."""
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


class _Side:
    """One backend's own stream over the clip, and the time it spent in the network."""

    def __init__(
        self, backend: Backend, config: WeightsConfig, options: StreamOptions, name: str
    ) -> None:
        self.backend = backend
        self.stream = FrameStream(config, options, stream_id=name)
        self.rows: list[FrameResult] = []
        self.seconds = 0.0

    def run(self, x: torch.Tensor, n: int, allow_tf32: bool) -> tuple[np.ndarray, np.ndarray]:
        """Logits and probabilities ``(n, 3, h, w)`` float32 on the CPU (sigmoid on the
        backend's device, as :func:`ttball.pipeline.infer_windows` does it)."""
        start = time.perf_counter()
        with tf32(allow_tf32):
            logits = self.backend(x)[:n]
            probs = torch.sigmoid(logits).float().cpu().numpy()
        self.seconds += time.perf_counter() - start
        return logits.float().cpu().numpy(), probs


def _frames(source: FrameSource, max_frames: int | None) -> Iterator[Frame]:
    return itertools.islice(iter(source), max_frames)


def _used(window: Window, covered: set[int], step: int) -> list[tuple[int, int]]:
    """(position, slot) of the heatmaps the stream takes from ``window``: as
    :meth:`FrameStream.complete`, padded repeats once, and with step 3 each slot once."""
    used, seen = [], set()
    for position, slot in enumerate(window.slots):
        if slot in seen:
            continue
        seen.add(slot)
        if step == 1 or slot not in covered:
            used.append((position, slot))
        covered.add(slot)
    return used


def _best(prob: np.ndarray, geometry: FrameGeometry, threshold: float) -> Detection | None:
    found = detect(prob, geometry, threshold)
    return found[0] if found else None


class ClipRun:
    """The reference and the candidates over one clip (see the module docstring)."""

    def __init__(
        self,
        clip: Clip,
        reference: Backend,
        candidates: dict[str, Backend],
        config: WeightsConfig,
        stream: StreamOptions,
        batch: int,
        keep_images: int,
        allow_tf32: bool,
    ) -> None:
        self.clip, self.config, self.batch = clip, config, batch
        self.step, self.keep, self.allow_tf32 = stream.step, keep_images, allow_tf32
        self.ref = _Side(reference, config, stream, clip.name)
        self.cands = {n: _Side(b, config, stream, clip.name) for n, b in candidates.items()}
        self.results = {n: ClipResult(clip) for n in candidates}
        self.kept: list[int] = []  # slot → source frame index
        self.covered: set[int] = set()
        self.windows = 0
        self._tie = itertools.count()

    def run(self, max_frames: int | None = None) -> dict[str, ClipResult]:
        source = FrameSource(self.clip.path)
        pending: list[Window] = []
        for frame in _frames(source, max_frames):
            pending += self._push(frame)
            while len(pending) >= self.batch:
                self._flush(pending[: self.batch])
                pending = pending[self.batch :]
        if self.ref.stream.frames_in < MIN_FRAMES:
            raise VideoError(
                f"{self.clip.path}: {self.ref.stream.frames_in} readable frame(s); "
                f"at least {MIN_FRAMES} are needed"
            )
        pending += self.ref.stream.finish()
        for side in self.cands.values():
            side.stream.finish()
        while pending:
            self._flush(pending[: self.batch])
            pending = pending[self.batch :]
        self._finish(source)
        return self.results

    def _push(self, frame: Frame) -> list[Window]:
        before = self.ref.stream.duplicates
        windows = self.ref.stream.push(frame)
        for side in self.cands.values():
            side.stream.push(frame)  # same frames: the same windows (their slots are all we use)
        if self.ref.stream.duplicates == before:
            self.kept.append(frame.index)
        return windows

    def _batch(self, windows: list[Window]) -> torch.Tensor:
        """The normalised ``(batch, 9, h, w)`` float32 input, padded to the full batch size with
        the last window (one input shape: compiled and graph-captured backends build once)."""
        pixels = [w.pixels for w in windows]
        pixels += [pixels[-1]] * (self.batch - len(pixels))
        stacked = torch.from_numpy(np.stack(pixels))
        device = self.ref.backend.device
        if device.type == "cuda":
            stacked = stacked.pin_memory().to(device, non_blocking=True)
        return normalize(stacked, self.config)

    def _flush(self, windows: list[Window]) -> None:
        x, n = self._batch(windows), len(windows)
        ref_logits, ref_probs = self.ref.run(x, n, allow_tf32=False)
        used = [
            (i, pos, slot)
            for i, w in enumerate(windows)
            for pos, slot in _used(w, self.covered, self.step)
        ]
        geometry, threshold = self.ref.stream.geometry, self.ref.stream.threshold
        assert geometry is not None
        ref_best = [_best(ref_probs[i, pos], geometry, threshold) for i, pos, _ in used]
        for window, probs in zip(windows, ref_probs):
            self.ref.rows += self.ref.stream.complete(window, probs)
        for name, side in list(self.cands.items()):
            try:
                logits, probs = side.run(x, n, self.allow_tf32)
            except Exception as exc:  # noqa: BLE001  (a broken candidate fails its gate, not the run)
                self.results[name].error = f"{type(exc).__name__}: {exc}".splitlines()[0]
                del self.cands[name]
                continue
            self._compare(name, windows, used, ref_best, (ref_logits, ref_probs), (logits, probs))
            for window, p in zip(windows, probs):
                side.rows += side.stream.complete(window, p)
        self.windows += n

    def _compare(
        self,
        name: str,
        windows: list[Window],
        used: list[tuple[int, int, int]],
        ref_best: list[Detection | None],
        ref: tuple[np.ndarray, np.ndarray],
        cand: tuple[np.ndarray, np.ndarray],
    ) -> None:
        if not used:
            return
        rows, cols = [i for i, _, _ in used], [pos for _, pos, _ in used]
        r_logits, r_probs = ref[0][rows, cols], ref[1][rows, cols]
        c_logits, c_probs = cand[0][rows, cols], cand[1][rows, cols]
        result, geometry = self.results[name], self.ref.stream.geometry
        threshold = self.ref.stream.threshold
        assert geometry is not None
        result.stats.add(r_logits, c_logits, r_probs, c_probs)
        flat = (len(used), -1)
        moved = r_logits.reshape(flat).argmax(1) != c_logits.reshape(flat).argmax(1)
        ball = (r_probs.reshape(flat).max(1) > threshold) | (
            c_probs.reshape(flat).max(1) > threshold
        )
        result.stats.peak_moved += int(moved.sum())
        result.stats.peak_moved_with_ball += int((moved & ball).sum())
        result.stats.with_ball += int(ball.sum())
        for k, (i, pos, slot) in enumerate(used):
            pair = FramePair(
                self.clip.name,
                self.kept[slot],
                self.windows + i,
                pos,
                ref_best[k],
                _best(c_probs[k], geometry, threshold),
                bool(moved[k]),
                bool(ball[k]),
            )
            result.pairs.append(pair)
            if self.keep:
                self._keep(
                    result,
                    pair,
                    windows[i].pixels[3 * pos : 3 * pos + 3],
                    r_probs[k],
                    c_probs[k],
                    geometry,
                )

    def _keep(
        self,
        result: ClipResult,
        pair: FramePair,
        rgb: np.ndarray,
        ref_prob: np.ndarray,
        cand_prob: np.ndarray,
        geometry: FrameGeometry,
    ) -> None:
        """Hold the pictures of the ``keep`` most severe heatmaps (bounded memory)."""
        severity = pair.severity
        if severity <= 0 or (len(result.keepers) >= self.keep and severity <= result.keepers[0][0]):
            return
        item = Keeper(
            pair, rgb.copy(), ref_prob.astype(np.float16), cand_prob.astype(np.float16), geometry
        )
        entry = (severity, next(self._tie), item)
        if len(result.keepers) < self.keep:
            heapq.heappush(result.keepers, entry)
        else:
            heapq.heapreplace(result.keepers, entry)

    def _finish(self, source: FrameSource) -> None:
        self.ref.rows += self.ref.stream.drain()
        gt = self.clip.gt
        last = self.ref.rows[-1].frame if self.ref.rows else -1
        gt = [g for g in gt if g.frame <= last] if gt is not None else None  # --max-frames
        ref_tally = tally_frames(self.ref.rows, gt) if gt is not None else None
        info = source.info
        src = {
            "path": str(self.clip.path),
            "width": info.width,
            "height": info.height,
            "fps": info.fps,
            "frames": self.ref.stream.frames_in,
            "kept": len(self.kept),
            "duplicates": self.ref.stream.duplicates,
            "corrupt": len(info.corrupt_frames),
            "other_size": len(info.other_size_frames),
            "windows": self.windows,
            "ground_truth": str(self.clip.gt_path) if self.clip.gt_path else None,
        }
        for name, result in self.results.items():
            side = self.cands.get(name)
            if side is not None:
                side.rows += side.stream.drain()
                result.cand_rows = side.rows
                result.seconds["candidate"] = side.seconds
            result.ref_rows, result.ref_tally = self.ref.rows, ref_tally
            if gt is not None and result.error is None:
                result.cand_tally = tally_frames(result.cand_rows, gt)
            result.source = src
            result.seconds["reference"] = self.ref.seconds


def run_clip(
    clip: Clip,
    reference: Backend,
    candidates: dict[str, Backend],
    config: WeightsConfig,
    stream: StreamOptions,
    batch: int,
    keep_images: int,
    allow_tf32: bool,
    max_frames: int | None,
) -> dict[str, ClipResult]:
    """Every candidate against the reference on ``clip``; one :class:`ClipResult` each."""
    run = ClipRun(clip, reference, candidates, config, stream, batch, keep_images, allow_tf32)
    return run.run(max_frames)

"""Per-frame evaluation of ball tracks against ground truth, as the published tools do it.

The counts and their ratios follow WASB-SBDT / BlurBall's ``Evaluator`` exactly:

- GT visible, predicted visible: TP if the distance is *below* the radius (4 px at the original
  resolution by default), else FP1; the squared distance goes into the RMSE either way.
- GT invisible, predicted visible: FP2. GT visible, predicted invisible: FN. Neither: TN.
- precision = TP / (TP + FP1 + FP2); recall = TP / (TP + FN) (FP1 is not in the denominator);
  F1 their harmonic mean; accuracy = (TP + TN) / all frames.
- RMSE over the frames where both are visible (TP and FP1), as the published code does;
  ``rmse_tp`` is the same over TP frames only.
- AP: frames predicted visible, ranked by score (highest first, ties in frame order), each a hit
  if TP; AP = Σ over hits of precision-at-that-rank / (TP + FN).

Added here: median and 95th-percentile position error (both visible); blur-angle error
(mod 180°, so 89° vs −89° is 2°) and absolute blur-length error on frames where both are
visible and the GT blur length is at least ``min_blur`` px. Frames absent from the prediction
count as predicted invisible; frames absent from the ground truth are ignored; both are reported.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import numpy as np

from ttball.errors import UserError
from ttball.results import FrameResult, read_track_csv


@dataclass(frozen=True)
class EvalConfig:
    radius: float = 4.0  # px, original resolution: the published tools' match radius
    min_blur: float = 8.0  # px of GT blur_length_px for a frame to count in angle/length errors


@dataclass
class Tally:
    """Counts and per-frame errors; tallies of several clips add up with ``+=``."""

    tp: int = 0
    tn: int = 0
    fp1: int = 0
    fp2: int = 0
    fn: int = 0
    gt_frames: int = 0
    pred_frames: int = 0
    missing_frames: int = 0
    extra_frames: int = 0
    position_errors: list[float] = field(default_factory=list)  # both visible
    tp_errors: list[float] = field(default_factory=list)
    angle_errors: list[float] = field(default_factory=list)
    length_errors: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)  # frames predicted visible
    hits: list[bool] = field(default_factory=list)

    def __iadd__(self, other: Tally) -> Self:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


def angle_error_deg(a: float, b: float) -> float:
    """Difference of two undirected angles in degrees, in [0, 90]."""
    d = abs(a - b) % 180.0
    return min(d, 180.0 - d)


def tally_frames(
    pred: Sequence[FrameResult], gt: Sequence[FrameResult], config: EvalConfig = EvalConfig()
) -> Tally:
    """Compare one clip's prediction with its ground truth, frame by frame (by frame index)."""
    by_frame = _index(pred, "prediction")
    gt_index = _index(gt, "ground truth")
    t = Tally(gt_frames=len(gt), pred_frames=len(pred))
    t.missing_frames = sum(1 for f in gt_index if f not in by_frame)
    t.extra_frames = sum(1 for f in by_frame if f not in gt_index)
    for g in sorted(gt, key=lambda r: r.frame):
        p = by_frame.get(g.frame)
        _tally_one(t, p if p is not None and p.visible else None, g, config)
    return t


def _index(rows: Sequence[FrameResult], what: str) -> dict[int, FrameResult]:
    out: dict[int, FrameResult] = {}
    for r in rows:
        if r.frame in out:
            raise UserError(f"{what} lists frame {r.frame} twice")
        out[r.frame] = r
    return out


def _tally_one(t: Tally, p: FrameResult | None, g: FrameResult, config: EvalConfig) -> None:
    if p is None:
        if g.visible:
            t.fn += 1
        else:
            t.tn += 1
        return
    t.scores.append(p.score)
    if not g.visible:
        t.fp2 += 1
        t.hits.append(False)
        return
    dist = math.hypot(p.x - g.x, p.y - g.y)
    hit = dist < config.radius
    t.hits.append(hit)
    t.position_errors.append(dist)
    if hit:
        t.tp += 1
        t.tp_errors.append(dist)
    else:
        t.fp1 += 1
    if g.blur_length_px >= config.min_blur:
        t.angle_errors.append(angle_error_deg(p.blur_angle_deg, g.blur_angle_deg))
        t.length_errors.append(abs(p.blur_length_px - g.blur_length_px))


def average_precision(
    scores: Sequence[float], hits: Sequence[bool], positives: int
) -> float | None:
    """AP over predictions ranked by score, recall relative to ``positives`` (TP + FN)."""
    if positives <= 0:
        return None
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    ranked = np.asarray(hits, dtype=bool)[order]
    ranks = np.flatnonzero(ranked) + 1  # 1-based rank of each hit
    return float(np.sum(np.arange(1, len(ranks) + 1) / ranks) / positives)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else 0.0


def _stats(values: list[float], prefix: str) -> dict[str, float | None]:
    if not values:
        return {f"{prefix}_mean": None, f"{prefix}_median": None, f"{prefix}_p95": None}
    a = np.asarray(values)
    return {
        f"{prefix}_mean": float(a.mean()),
        f"{prefix}_median": float(np.median(a)),
        f"{prefix}_p95": float(np.percentile(a, 95)),
    }


def summarise(t: Tally) -> dict[str, Any]:
    """Metrics of a tally (undefined ones are None)."""
    fp = t.fp1 + t.fp2
    prec, rec = _ratio(t.tp, t.tp + fp), _ratio(t.tp, t.tp + t.fn)
    pos = np.asarray(t.position_errors)
    out: dict[str, Any] = {
        "gt_frames": t.gt_frames,
        "pred_frames": t.pred_frames,
        "missing_frames": t.missing_frames,
        "extra_frames": t.extra_frames,
        "tp": t.tp,
        "tn": t.tn,
        "fp1": t.fp1,
        "fp2": t.fp2,
        "fp": fp,
        "fn": t.fn,
        "precision": prec,
        "recall": rec,
        "f1": _ratio(2 * prec * rec, prec + rec),
        "accuracy": _ratio(t.tp + t.tn, t.tp + t.tn + fp + t.fn),
        "rmse": float(np.sqrt(np.mean(pos**2))) if len(pos) else None,
        "rmse_tp": float(np.sqrt(np.mean(np.square(t.tp_errors)))) if t.tp_errors else None,
        "ap": average_precision(t.scores, t.hits, t.tp + t.fn),
        "both_visible": len(pos),
        "position_error_median": float(np.median(pos)) if len(pos) else None,
        "position_error_p95": float(np.percentile(pos, 95)) if len(pos) else None,
        "blur_frames": len(t.angle_errors),
    }
    out.update(_stats(t.angle_errors, "angle_error_deg"))
    out.update(_stats(t.length_errors, "length_error_px"))
    return out


def pair_paths(pred: Path, gt: Path) -> list[tuple[str, Path | None, Path]]:
    """(name, prediction file or None, ground-truth file) for a file pair or two folders.
    In a folder, ``GT/clip.csv`` pairs with ``PRED/clip/track.csv`` or else ``PRED/clip.csv``."""
    if not gt.exists():
        raise UserError(f"{gt} does not exist")
    if not pred.exists():
        raise UserError(f"{pred} does not exist")
    if gt.is_file() and pred.is_file():
        return [(gt.stem, pred, gt)]
    if not (gt.is_dir() and pred.is_dir()):
        raise UserError(f"give two CSV files or two folders, not {pred} and {gt}")
    gts = sorted(p for p in gt.glob("*.csv") if p.is_file())
    if not gts:
        raise UserError(f"{gt} holds no ground-truth .csv files")
    pairs: list[tuple[str, Path | None, Path]] = []
    for g in gts:
        nested, flat = pred / g.stem / "track.csv", pred / f"{g.stem}.csv"
        pairs.append((g.stem, nested if nested.is_file() else flat if flat.is_file() else None, g))
    if all(p is None for _, p, _ in pairs):
        raise UserError(
            f"no prediction in {pred} matches a ground-truth file of {gt} (e.g. {gts[0].stem}.csv)"
        )
    return pairs


def evaluate_paths(
    pred: str | os.PathLike[str], gt: str | os.PathLike[str], config: EvalConfig = EvalConfig()
) -> dict[str, Any]:
    """The report for a file pair or two folders: per-clip metrics and their pooled total."""
    total = Tally()
    clips = []
    for name, p, g in pair_paths(Path(pred), Path(gt)):
        truth = read_track_csv(g)
        if not truth:  # (every metric would be None: "total 0")
            raise UserError(f"{g}: a ground truth with no frames")
        t = tally_frames(read_track_csv(p) if p is not None else [], truth, config)
        total += t
        clips.append({"name": name, "pred": str(p) if p else None, "gt": str(g), **summarise(t)})
    return {
        "radius_px": config.radius,
        "min_blur_px": config.min_blur,
        "total": summarise(total),
        "clips": clips,
    }


_COLUMNS = (  # header, key, format
    ("clip", "name", "{}"),
    ("frames", "gt_frames", "{}"),
    ("TP", "tp", "{}"),
    ("TN", "tn", "{}"),
    ("FP1", "fp1", "{}"),
    ("FP2", "fp2", "{}"),
    ("FN", "fn", "{}"),
    ("prec", "precision", "{:.4f}"),
    ("recall", "recall", "{:.4f}"),
    ("F1", "f1", "{:.4f}"),
    ("acc", "accuracy", "{:.4f}"),
    ("RMSE", "rmse", "{:.2f}"),
    ("AP", "ap", "{:.4f}"),
    ("err50", "position_error_median", "{:.2f}"),
    ("err95", "position_error_p95", "{:.2f}"),
    ("angle°", "angle_error_deg_mean", "{:.1f}"),
    ("len", "length_error_px_mean", "{:.2f}"),
)


def format_table(report: dict[str, Any]) -> str:
    """A plain-text table: one row per clip (if several) and the total."""
    rows = report["clips"] if len(report["clips"]) > 1 else []
    rows = [*rows, {**report["total"], "name": "total"}]
    cells = [[h for h, _, _ in _COLUMNS]]
    cells += [[("-" if r.get(k) is None else f.format(r[k])) for _, k, f in _COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        f"match radius {report['radius_px']:g} px; RMSE over frames both visible; "
        "err50/err95: median/95th percentile position error (px); "
        f"angle/len: mean blur errors on frames with GT blur ≥ {report['min_blur_px']:g} px "
        f"({report['total']['blur_frames']} frames)"
    )
    lines += _notes(report)
    return "\n".join(lines)


def _notes(report: dict[str, Any]) -> list[str]:
    notes = []
    for c in report["clips"]:
        if c["pred"] is None:
            notes.append(
                f"note: {c['name']}: no prediction file; all {c['gt_frames']} frames count "
                "as predicted invisible"
            )
        elif c["missing_frames"] or c["extra_frames"]:
            notes.append(
                f"note: {c['name']}: frame count mismatch: {c['gt_frames']} in ground truth, "
                f"{c['pred_frames']} predicted ({c['missing_frames']} missing → invisible, "
                f"{c['extra_frames']} extra → ignored)"
            )
    return notes

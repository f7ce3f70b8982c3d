"""Tolerances, the verdict, and the report: per clip and overall agreement, ground-truth
accuracy of each side, the worst frames. ``docs/verification/README.md`` explains the fields."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ttball.errors import UserError
from ttball.evaluate import EvalConfig, Tally, angle_error_deg, summarise
from ttball.results import FrameResult
from ttball.verify._compare import ClipResult, FramePair, HeatmapStats

MAX_LISTED = 200  # flips and differing track frames listed by number (the counts are exact)
MIN_BLUR_PX = EvalConfig().min_blur  # 8 px: where ttball.evaluate starts scoring blur angles


@dataclass(frozen=True)
class Tolerances:
    """What a candidate may differ by and still pass (positions in original-frame pixels).

    ``max_flips`` bounds visibility decisions that differ, per heatmap and after the tracker;
    ``p99_px`` the 99th percentile of the position difference over heatmaps both call visible;
    ``min_compared`` frames both must call visible, or nothing was verified. ``track_px``: a
    tracked frame whose position moved more than this is listed as differing (not gated).
    """

    max_flips: int = 0
    p99_px: float = 0.5
    min_compared: int = 1
    track_px: float = 0.5

    def __post_init__(self) -> None:
        if self.max_flips < 0:
            raise UserError(f"max_flips must be 0 or more, got {self.max_flips}")
        if not (self.p99_px >= 0 and self.track_px >= 0):  # also refuses NaN
            raise UserError(
                f"pixel tolerances must be 0 or more, got {self.p99_px}, {self.track_px}"
            )
        if self.min_compared < 0:
            raise UserError(f"min_compared must be 0 or more, got {self.min_compared}")


@dataclass(frozen=True)
class Check:
    name: str
    value: Any
    limit: str
    passed: bool


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Median, p95, p99 and max (None for no values)."""
    if not len(values):
        return {"median": None, "p95": None, "p99": None, "max": None}
    a = np.asarray(values, dtype=np.float64)
    return {
        "median": float(np.median(a)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
    }


def detection_summary(pairs: Sequence[FramePair]) -> dict[str, Any]:
    """Visibility decisions and geometry of the best candidate of each side, per heatmap.
    Blur angles are compared where the reference's streak is at least ``MIN_BLUR_PX`` long (on
    a round blob the angle is noise: 64° p99 on the bundled end-view clip, eager BF16 on CPU)."""
    both = [(p.ref, p.cand) for p in pairs if p.ref is not None and p.cand is not None]
    streaks = [(r, c) for r, c in both if r.blur_length_px >= MIN_BLUR_PX]
    flips = [p for p in pairs if p.flip]
    return {
        "heatmaps": len(pairs),
        "reference_visible": sum(p.ref is not None for p in pairs),
        "candidate_visible": sum(p.cand is not None for p in pairs),
        "both_visible": len(both),
        "flips": len(flips),
        "flips_ref_only": sum(p.ref is not None for p in flips),
        "flips_cand_only": sum(p.cand is not None for p in flips),
        "position_diff_px": spread([math.hypot(c.x - r.x, c.y - r.y) for r, c in both]),
        "angle_frames": len(streaks),
        "angle_diff_deg": spread(
            [angle_error_deg(r.blur_angle_deg, c.blur_angle_deg) for r, c in streaks]
        ),
        "length_diff_px": spread([abs(r.blur_length_px - c.blur_length_px) for r, c in both]),
    }


def track_summary(
    ref: Sequence[FrameResult], cand: Sequence[FrameResult], track_px: float
) -> dict[str, Any]:
    """The two trackers' outputs frame by frame: visibility flips and position differences."""
    by_frame = {r.frame: r for r in cand}
    flips, dists, differ = [], [], []
    for r in ref:
        c = by_frame.get(r.frame)
        if c is None or c.visible != r.visible:
            flips.append(r.frame)
            differ.append(r.frame)
        elif r.visible:
            d = math.hypot(c.x - r.x, c.y - r.y)
            dists.append(d)
            if d > track_px:
                differ.append(r.frame)
    return {
        "frames": len(ref),
        "visibility_flips": len(flips),
        "flip_frames": flips[:MAX_LISTED],
        "both_visible": len(dists),
        "position_diff_px": spread(dists),
        "differing": len(differ),
        "differing_frames": differ[:MAX_LISTED],
    }


def accuracy(tally: Tally | None) -> dict[str, Any] | None:
    if tally is None:
        return None
    s = summarise(tally)
    keys = (
        "f1",
        "precision",
        "recall",
        "position_error_median",
        "position_error_p95",
        "tp",
        "fp1",
        "fp2",
        "fn",
        "gt_frames",
    )
    return {k: s[k] for k in keys}


def detection_row(d: Any) -> dict[str, Any] | None:
    if d is None:
        return None
    return {k: round(v, 4) for k, v in asdict(d).items()}


def pair_row(p: FramePair) -> dict[str, Any]:
    dist = p.distance
    return {
        "clip": p.clip,
        "frame": p.frame,
        "window": p.window,
        "position": p.position,
        "kind": "flip" if p.flip else "position",
        "distance_px": None if dist is None else round(dist, 4),
        "reference": detection_row(p.ref),
        "candidate": detection_row(p.cand),
        "peak_moved": p.peak_moved,
    }


@dataclass
class VerifyReport:
    """The outcome for one candidate: JSON via :meth:`to_json`, Markdown via
    :func:`ttball.verify.to_markdown`. ``passed`` is the gate."""

    candidate: str
    reference: str
    settings: dict[str, Any]
    tolerances: Tolerances
    overall: dict[str, Any]
    clips: list[dict[str, Any]]
    checks: list[Check]
    worst: list[dict[str, Any]]
    ground_truth: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    images: list[str] = field(default_factory=list)
    results: list[ClipResult] = field(default_factory=list, repr=False)  # raw, not serialised

    @property
    def complete(self) -> bool:
        """Every clip was verified (False in the reports handed out along the way)."""
        return self.settings.get("clips_done") == self.settings.get("clips_total")

    @property
    def passed(self) -> bool:
        return self.complete and self.error is None and all(c.passed for c in self.checks)

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def reason(self) -> str:
        """One line: why it failed, or that it passed."""
        if self.error:
            return f"{self.candidate} failed to run: {self.error}"
        if not self.complete:
            done, total = self.settings.get("clips_done"), self.settings.get("clips_total")
            return f"{self.candidate}: incomplete, {done} of {total} clips verified so far"
        bad = self.failed_checks
        if not bad:
            return f"{self.candidate} agrees with {self.reference} within tolerances"
        return f"{self.candidate} differs from {self.reference}: " + "; ".join(
            f"{c.name} {_fmt(c.value)} (limit {c.limit})" for c in bad
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "complete": self.complete,
            "verdict": self.reason(),
            "candidate": self.candidate,
            "reference": self.reference,
            "settings": self.settings,
            "tolerances": asdict(self.tolerances),
            "checks": [asdict(c) for c in self.checks],
            "overall": self.overall,
            "clips": self.clips,
            "ground_truth": self.ground_truth,
            "worst": self.worst,
            "images": self.images,
            "notes": self.notes,
            "error": self.error,
        }


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _agreement(
    stats: HeatmapStats,
    pairs: Sequence[FramePair],
    ref_rows: Sequence[FrameResult],
    cand_rows: Sequence[FrameResult],
    tol: Tolerances,
) -> dict[str, Any]:
    return {
        "heatmaps": stats.summary(),
        "detections": detection_summary(pairs),
        "track": track_summary(ref_rows, cand_rows, tol.track_px),
    }


def checks(overall: dict[str, Any], tol: Tolerances) -> list[Check]:
    det, trk, hm = overall["detections"], overall["track"], overall["heatmaps"]
    p99 = det["position_diff_px"]["p99"]
    return [
        Check("non-finite candidate heatmaps", hm["nonfinite"], "0", hm["nonfinite"] == 0),
        Check(
            "visibility flips (detections)",
            det["flips"],
            f"<= {tol.max_flips}",
            det["flips"] <= tol.max_flips,
        ),
        Check(
            "visibility flips (track)",
            trk["visibility_flips"],
            f"<= {tol.max_flips}",
            trk["visibility_flips"] <= tol.max_flips,
        ),
        Check(
            "position difference p99 (px)",
            p99,
            f"<= {tol.p99_px:g}",
            p99 is None or p99 <= tol.p99_px,
        ),
        Check(
            "heatmaps both call visible",
            det["both_visible"],
            f">= {tol.min_compared}",
            det["both_visible"] >= tol.min_compared,
        ),
    ]


def build_report(
    candidate: str,
    reference: str,
    results: Sequence[ClipResult],
    tol: Tolerances,
    settings: dict[str, Any],
    worst: int,
) -> VerifyReport:
    """Pool a candidate's clips into its report and verdict."""
    clips, stats, pairs = [], HeatmapStats(), []
    ref_rows: list[FrameResult] = []
    cand_rows: list[FrameResult] = []
    for r in results:
        agreement = _agreement(r.stats, r.pairs, r.ref_rows, r.cand_rows, tol)
        clips.append(
            {
                "name": r.clip.name,
                **r.source,
                "seconds": r.seconds,
                **agreement,
                "ground_truth_accuracy": _gt_pair(r.ref_tally, r.cand_tally),
            }
        )
        stats += r.stats
        pairs += r.pairs
        # Frame numbers repeat across clips: offset them so the pooled track comparison pairs
        # each clip's frames only with themselves.
        offset = 10**9 * len(clips)
        ref_rows += [_shift(x, offset) for x in r.ref_rows]
        cand_rows += [_shift(x, offset) for x in r.cand_rows]
    overall = _agreement(stats, pairs, ref_rows, cand_rows, tol)
    overall["track"]["flip_frames"] = _clip_frames(clips, "flip_frames")
    overall["track"]["differing_frames"] = _clip_frames(clips, "differing_frames")
    overall["seconds"] = {k: sum(r.seconds[k] for r in results) for k in ("reference", "candidate")}
    errors = [f"{r.clip.name}: {r.error}" for r in results if r.error]
    return VerifyReport(
        candidate=candidate,
        reference=reference,
        settings=settings,
        tolerances=tol,
        overall=overall,
        clips=clips,
        checks=checks(overall, tol),
        worst=_worst(pairs, worst),
        ground_truth=_ground_truth(results),
        notes=_notes(overall),
        error="; ".join(errors) or None,
        results=list(results),
    )


def _shift(row: FrameResult, offset: int) -> FrameResult:
    return FrameResult(
        row.frame + offset,
        row.time_s,
        row.visible,
        row.x,
        row.y,
        row.blur_angle_deg,
        row.blur_length_px,
        row.score,
    )


def _clip_frames(clips: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    out = [{"clip": c["name"], "frame": f} for c in clips for f in c["track"][key]]
    return out[:MAX_LISTED]


def _worst(pairs: Sequence[FramePair], worst: int) -> list[dict[str, Any]]:
    """Every flip (up to MAX_LISTED), then the ``worst`` biggest position differences."""
    flips = [p for p in pairs if p.flip][:MAX_LISTED]
    both = sorted((p for p in pairs if p.distance is not None), key=lambda p: -p.distance)  # type: ignore[operator]
    return [pair_row(p) for p in flips + both[:worst]]


def _gt_pair(ref: Tally | None, cand: Tally | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {"reference": accuracy(ref), "candidate": accuracy(cand)}


def _ground_truth(results: Sequence[ClipResult]) -> dict[str, Any] | None:
    with_gt = [r for r in results if r.ref_tally is not None]
    if not with_gt:
        return None
    ref, cand = Tally(), Tally()
    for r in with_gt:
        ref += r.ref_tally  # type: ignore[arg-type]
        if r.cand_tally is not None:
            cand += r.cand_tally
    return {
        "clips": [r.clip.name for r in with_gt],
        "reference": accuracy(ref),
        "candidate": accuracy(cand),
    }


def _notes(overall: dict[str, Any]) -> list[str]:
    det, hm = overall["detections"], overall["heatmaps"]
    notes = []
    if det["reference_visible"] == 0 and det["candidate_visible"] == 0:
        notes.append(
            "neither backend found the ball in any frame: positions were not compared "
            "(are these the right weights and clips?)"
        )
    if hm["peak_moved"] > hm["peak_moved_with_ball"]:
        notes.append(
            f"{hm['peak_moved'] - hm['peak_moved_with_ball']} heatmap(s) without a ball "
            "have their peak elsewhere: on a flat background the argmax is noise"
        )
    return notes

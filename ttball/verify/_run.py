"""Entry points: verify candidates against a reference, write the reports, bench columns."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ttball.backends import Backend, config_of
from ttball.errors import UserError
from ttball.model.config import WeightsConfig
from ttball.results import atomic_write, write_json
from ttball.stream import StreamOptions
from ttball.verify._compare import ClipResult, run_clip
from ttball.verify._images import image_name, render, write_image
from ttball.verify._inputs import prepare_clips
from ttball.verify._markdown import summary_markdown, to_markdown
from ttball.verify._report import Tolerances, VerifyReport, build_report


@dataclass(frozen=True)
class VerifyOptions:
    """How the clips are run. ``batch``: windows per call (the last one padded to it);
    ``images``: how many worst frames to keep pictures of; ``tf32``: allow TF32 on CUDA for the
    candidates (the reference always runs true FP32); ``max_frames``: per clip, from its start."""

    step: int = 3
    batch: int = 1
    threshold: float | None = None
    dedup_ssim: float | None = None
    worst: int = 20
    images: int = 0
    tf32: bool = False
    max_frames: int | None = None

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise UserError(f"batch must be at least 1, got {self.batch}")
        if self.max_frames is not None and self.max_frames < 3:
            raise UserError(f"max_frames must be at least 3, got {self.max_frames}")
        if self.worst < 0 or self.images < 0:
            raise UserError(f"worst and images must be 0 or more, got {self.worst}, {self.images}")
        self.stream()  # validates step and threshold

    def stream(self) -> StreamOptions:
        try:
            return StreamOptions(
                step=self.step, threshold=self.threshold, dedup_ssim=self.dedup_ssim
            )
        except ValueError as exc:
            raise UserError(str(exc)) from None


def verify_many(
    candidates: Mapping[str, Backend],
    reference: Backend,
    clips: Sequence[str | os.PathLike[str]],
    tolerances: Tolerances | None = None,
    *,
    config: WeightsConfig | None = None,
    options: VerifyOptions | None = None,
    gt_dir: str | os.PathLike[str] | None = None,
    on_clip: Callable[[str, dict[str, VerifyReport]], None] | None = None,
) -> dict[str, VerifyReport]:
    """Each candidate against ``reference`` on the same windows of ``clips``; every clip is
    decoded once and the reference runs once per batch. A candidate that raises fails its own
    report (``error``) and is left out of the later clips. ``on_clip(name, reports)`` gets the
    reports so far (``complete`` False until the last clip) after each clip."""
    if not candidates:
        raise UserError("no candidate backend to verify")
    tolerances, options = tolerances or Tolerances(), options or VerifyOptions()
    prepared = prepare_clips(clips, gt_dir)
    config = config or config_of(reference)
    settings = _settings(reference, config, options)
    live = dict(candidates)
    per_candidate: dict[str, list[ClipResult]] = {n: [] for n in candidates}

    def reports(done: int) -> dict[str, VerifyReport]:
        return {
            name: build_report(
                name,
                getattr(reference, "name", "reference"),
                results,
                tolerances,
                {
                    **settings,
                    "candidate_device": str(candidates[name].device),
                    "clips_done": done,
                    "clips_total": len(prepared),
                },
                options.worst,
            )
            for name, results in per_candidate.items()
        }

    for done, clip in enumerate(prepared, 1):
        if not live:
            break
        stream = options.stream()
        results = run_clip(
            clip,
            reference,
            live,
            config,
            stream,
            options.batch,
            options.images,
            options.tf32,
            options.max_frames,
        )
        for name, result in results.items():
            per_candidate[name].append(result)
            if result.error:
                live.pop(name)
        if on_clip:
            on_clip(clip.name, reports(done))
    return reports(len(prepared))


def verify_backend(
    candidate: Backend,
    reference: Backend,
    clips: Sequence[str | os.PathLike[str]],
    tolerances: Tolerances | None = None,
    *,
    config: WeightsConfig | None = None,
    options: VerifyOptions | None = None,
    gt_dir: str | os.PathLike[str] | None = None,
) -> VerifyReport:
    """``candidate`` against ``reference`` (e.g. eager FP32) on ``clips``; ``report.passed`` is
    the gate, ``report.reason()`` says why in one line. ``config`` defaults to the weights'
    configuration the reference's model carries."""
    name = getattr(candidate, "name", "candidate")
    return verify_many(
        {name: candidate},
        reference,
        clips,
        tolerances,
        config=config,
        options=options,
        gt_dir=gt_dir,
    )[name]


def agreement_columns(
    candidate: Backend,
    reference: Backend,
    clips: Sequence[str | os.PathLike[str]],
    *,
    config: WeightsConfig | None = None,
    options: VerifyOptions | None = None,
    tolerances: Tolerances | None = None,
) -> dict[str, Any]:
    """Flat columns for a bench row: decision flips, p99 position difference (px), heatmaps
    whose peak moved (with a ball / all), and the verdict with the default tolerances."""
    report = verify_backend(candidate, reference, clips, tolerances, config=config, options=options)
    return summary_row(report, prefix="verify_")


def summary_row(report: VerifyReport, prefix: str = "") -> dict[str, Any]:
    o = report.overall
    det, hm = o["detections"], o["heatmaps"]
    row = {
        "passed": report.passed,
        "flips": det["flips"],
        "p99_px": det["position_diff_px"]["p99"],
        "max_px": det["position_diff_px"]["max"],
        "peak_moved_with_ball": hm["peak_moved_with_ball"],
        "peak_moved": hm["peak_moved"],
        "track_flips": o["track"]["visibility_flips"],
        "logit_rel": hm["logit_rel"],
        "compared": det["both_visible"],
    }
    return {f"{prefix}{k}": v for k, v in row.items()}


def _settings(reference: Backend, config: WeightsConfig, options: VerifyOptions) -> dict[str, Any]:
    return {
        "reference_device": str(reference.device),
        "weights": config.name,
        "weights_sha256": config.sha256[:16],
        "input": f"{config.input_width}x{config.input_height}",
        "threshold": options.threshold or config.score_threshold,
        **{k: v for k, v in asdict(options).items() if k not in ("threshold", "worst")},
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def write_report(
    report: VerifyReport, out: str | os.PathLike[str], images: bool = True
) -> list[Path]:
    """``verify.json``, ``verify.md`` and, where pictures were kept (and ``images``),
    ``images/*.png`` in ``out``."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {out}: {exc.strerror or exc}") from None
    written = _write_images(report, out) if images else []
    write_json(out / "verify.json", report.to_json())
    with atomic_write(out / "verify.md") as f:
        f.write(to_markdown(report))
    return [out / "verify.json", out / "verify.md", *written]


def _write_images(report: VerifyReport, out: Path) -> list[Path]:
    kept = [k for r in report.results for k in r.keepers]
    if not kept:
        return []
    worst = sorted(kept, key=lambda e: -e[0])[: int(report.settings.get("images", len(kept)))]
    folder = out / "images"
    folder.mkdir(exist_ok=True)
    paths = []
    for _, _, keeper in worst:
        path = folder / image_name(keeper)
        write_image(path, render(keeper, report.reference, report.candidate))
        paths.append(path)
    report.images = [f"images/{p.name}" for p in paths]
    return paths


def write_summary(
    reports: Mapping[str, VerifyReport], unavailable: Mapping[str, str], out: str | os.PathLike[str]
) -> list[dict[str, Any]]:
    """``summary.json`` and ``summary.md`` of a multi-candidate run; returns the rows."""
    rows: list[dict[str, Any]] = []
    for name, report in reports.items():
        status = "pass" if report.passed else "error" if report.error else "fail"
        rows.append(
            {"candidate": name, "status": status, **summary_row(report), "reason": report.reason()}
        )
    rows += [
        {"candidate": n, "status": "unavailable", "reason": why} for n, why in unavailable.items()
    ]
    out = Path(out)
    write_json(out / "summary.json", rows)
    with atomic_write(out / "summary.md") as f:
        f.write(summary_markdown(rows))
    return rows

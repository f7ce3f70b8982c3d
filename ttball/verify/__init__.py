"""Prove an optimized backend still finds the same ball before it is switched on.

Fusion changes the order of additions and FP16 changes rounding; a backend is switched on only
once it agrees with the reference (eager FP32) on recorded frames: same visibility calls, same
positions within a tolerance, same track after the tracker. ``ttball verify`` is the command;
the server calls :func:`verify_backend` at start-up on :func:`bundled_reference_clips`::

    report = verify_backend(candidate, reference, bundled_reference_clips(), config=model.config)
    if not report.passed:
        raise RuntimeError(report.reason())

``docs/verification/README.md`` explains the report, the tolerances and why.
"""

from ttball.verify._compare import FramePair, HeatmapStats
from ttball.verify._inputs import Clip, bundled_reference_clips, prepare_clips
from ttball.verify._markdown import to_markdown
from ttball.verify._report import Check, Tolerances, VerifyReport
from ttball.verify._run import (
    VerifyOptions,
    agreement_columns,
    summary_row,
    verify_backend,
    verify_many,
    write_report,
    write_summary,
)

__all__ = [
    "Check",
    "Clip",
    "FramePair",
    "HeatmapStats",
    "Tolerances",
    "VerifyOptions",
    "VerifyReport",
    "agreement_columns",
    "bundled_reference_clips",
    "prepare_clips",
    "summary_row",
    "to_markdown",
    "verify_backend",
    "verify_many",
    "write_report",
    "write_summary",
]

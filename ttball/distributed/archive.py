"""Track an archive of videos on a Ray cluster: one task per video, results written atomically.

Layout: ``ARCHIVE/a/b/clip.mp4`` → ``OUT/a/b/clip/track.csv`` + ``track.json``. The driver
writes each video's folder under a temporary name and renames it into place, so a crash never
leaves half a result. A rerun skips videos whose ``track.json`` records the same weights
(sha256) and settings; a video that keeps failing is listed in ``OUT/archive.json`` and the
others carry on. Workers read the videos from their paths, so every node must see ``ARCHIVE``
under the same path; only the driver writes to ``OUT``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ttball.errors import UserError

VIDEO_SUFFIXES = frozenset({".mp4", ".avi", ".mov", ".mkv", ".webm"})
REPORT_NAME = "archive.json"


@dataclass(frozen=True)
class ArchiveSettings:
    """What decides a video's result: a rerun with equal settings reuses the written one."""

    weights_sha256: str
    backend: str = "eager-fp32"
    device: str = "cpu"
    step: int = 3
    batch: int = 1
    threshold: float | None = None
    dedup_ssim: float | None = None
    csv_format: str = "ttball"


@dataclass
class ArchiveReport:
    """How an archive run went; ``failed`` maps a video (relative path) to its last error."""

    archive: Path
    out: Path
    settings: ArchiveSettings
    weights_name: str
    tracked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    frames: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return len(self.tracked) + len(self.skipped) + len(self.failed)

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "archive": str(self.archive),
            "out": str(self.out),
            "weights": {"name": self.weights_name, "sha256": self.settings.weights_sha256},
            "settings": asdict(self.settings),
            "videos": self.total,
            "tracked": sorted(self.tracked),
            "skipped": sorted(self.skipped),
            "failed": [
                {"video": v, "attempts": self.attempts.get(v, 0), "error": e}
                for v, e in sorted(self.failed.items())
            ],
            "frames": self.frames,
            "seconds": round(self.seconds, 3),
            "frames_per_s": round(self.frames_per_s, 1),
        }


# --------------------------------------------------------------------------- discovery


def find_videos(archive: Path, exclude: Path | None = None) -> list[Path]:
    """Video files under ``archive`` (recursively; hidden entries and ``exclude`` left out)."""
    if not archive.is_dir():
        raise UserError(f"archive {archive} is not a folder")
    skip = exclude.resolve() if exclude is not None else None
    found = [
        p for p in archive.rglob("*")
        if p.suffix.lower() in VIDEO_SUFFIXES and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(archive).parts)
        and not (skip is not None and p.resolve().is_relative_to(skip))
    ]
    return sorted(found)


def result_dir(out: Path, rel: Path) -> Path:
    """``OUT/<relative path without suffix>``."""
    return out / rel.with_suffix("")


def _check_collisions(archive: Path, videos: list[Path]) -> None:
    seen: dict[Path, Path] = {}
    for video in videos:
        key = video.relative_to(archive).with_suffix("")
        if key in seen:
            raise UserError(
                f"{seen[key]} and {video} would both write to OUT/{key}; rename one of them"
            )
        seen[key] = video


def is_done(folder: Path, settings: ArchiveSettings) -> bool:
    """Whether ``folder`` holds a complete result made with ``settings``."""
    try:
        meta = json.loads((folder / "track.json").read_text())
    except (OSError, ValueError):
        return False
    return (folder / "track.csv").is_file() and meta.get("archive") == asdict(settings)


# --------------------------------------------------------------------------- writing


def write_result(folder: Path, rows: list[Any], payload: dict[str, Any], csv_format: str) -> None:
    """Write ``track.csv`` + ``track.json`` into a temporary folder, then rename it to ``folder``.

    An older result at ``folder`` is moved aside first and removed after the rename.
    """
    from ttball.results import write_blurball_csv, write_json, write_track_csv

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        writer = write_blurball_csv if csv_format == "blurball" else write_track_csv
        writer(tmp / "track.csv", rows)
        write_json(tmp / "track.json", payload)
        os.chmod(tmp, 0o777 & ~_umask())
        old = _move_aside(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _move_aside(folder: Path) -> Path | None:
    if not folder.exists():
        return None
    old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".old", dir=folder.parent))
    os.replace(folder, old / folder.name)
    return old


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


# --------------------------------------------------------------------------- the worker side

_BACKENDS: dict[tuple[str, str, str], Any] = {}  # one per worker process, reused across videos


def _worker_backend(weights: Any, settings: ArchiveSettings) -> tuple[Any, Any]:
    import torch

    from ttball.backends import create
    from ttball.model import BlurBall

    key = (settings.weights_sha256, settings.backend, settings.device)
    if key not in _BACKENDS:
        state, config = weights  # Ray resolved the ObjectRef passed to the task
        model = BlurBall()
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
        model.config = config
        model.eval()
        _BACKENDS.clear()  # one model per worker: a new job's weights replace the old
        _BACKENDS[key] = (create(settings.backend, model, settings.device), model)
    return _BACKENDS[key]


def track_one(video: str, weights: Any, settings: ArchiveSettings) -> dict[str, Any]:
    """Body of the Ray task: track ``video``; returns rows and the ``track.json`` payload."""
    from ttball.pipeline import track

    runner, model = _worker_backend(weights, settings)
    result = track(video, model=model, backend=runner, device=settings.device,
                   step=settings.step, threshold=settings.threshold, batch=settings.batch,
                   dedup_ssim=settings.dedup_ssim)
    payload = result.to_json()
    payload["settings"]["csv_format"] = settings.csv_format
    payload["archive"] = asdict(settings)
    return {"rows": result.rows, "payload": payload}


# --------------------------------------------------------------------------- the driver


def _load_weights(weights: str | os.PathLike[str] | None) -> tuple[dict[str, Any], Any]:
    from ttball.model import load_model

    model = load_model(weights, device="cpu")
    state = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    return state, model.config


def _connect(address: str | None, num_cpus: int | None) -> bool:
    """Connect to ``address`` or start a loopback-only local cluster; True if started here."""
    import ray

    if ray.is_initialized():
        return False
    if address is None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                 log_to_driver=False)
    else:
        try:
            ray.init(address=address, log_to_driver=False)
        except ConnectionError as exc:
            raise UserError(f"cannot connect to the Ray cluster at {address}: {exc}") from None
    return True


def _error_text(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    err = cause if isinstance(cause, BaseException) else exc
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1] if text else ''}".rstrip(": ")


def track_archive(
    archive_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    address: str | None = None,
    weights: str | os.PathLike[str] | None = None,
    backend: str = "eager-fp32",
    device: str = "cpu",
    step: int = 3,
    batch: int = 1,
    threshold: float | None = None,
    dedup_ssim: float | None = None,
    csv_format: str = "ttball",
    num_gpus_per_task: float = 0,
    num_cpus_per_task: float = 1,
    num_cpus: int | None = None,
    retries: int = 2,
    progress: bool = True,
) -> ArchiveReport:
    """Track every video under ``archive_dir`` with Ray tasks; write ``OUT/archive.json``.

    ``address=None`` starts a local cluster (``num_cpus`` cores, no dashboard, loopback only)
    and stops it afterwards; otherwise connects to ``address`` (e.g. ``"auto"``). A Ray
    session already open in this process is used as it is. A failing video is tried
    ``1 + retries`` times, then reported in ``report.failed``.
    """
    archive, out = Path(archive_dir), Path(out_dir)
    _validate(backend, device, step, batch, csv_format, num_gpus_per_task, retries)
    videos = archive_videos(archive, out)
    _check_collisions(archive, videos)
    state, config = _load_weights(weights)
    settings = ArchiveSettings(config.sha256, backend, device, step, batch, threshold,
                               dedup_ssim, csv_format)
    report = ArchiveReport(archive, out, settings, config.name)
    todo: list[str] = []
    for video in videos:
        rel = video.relative_to(archive)
        (report.skipped if is_done(result_dir(out, rel), settings) else todo).append(str(rel))
    out.mkdir(parents=True, exist_ok=True)
    if todo:
        started = _connect(address, num_cpus)
        try:
            _run_tasks(report, todo, (state, config), num_cpus_per_task, num_gpus_per_task,
                       retries, progress)
        finally:
            if started:
                import ray

                ray.shutdown()
    from ttball.results import write_json

    write_json(out / REPORT_NAME, report.to_json())
    return report


def _validate(backend: str, device: str, step: int, batch: int, csv_format: str,
              num_gpus: float, retries: int) -> None:
    from ttball.backends import base

    if backend not in base.names():
        raise UserError(f"unknown backend {backend!r}; ttball bench --list shows them")
    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"unknown device {device!r}; use auto, cpu or cuda")
    if device == "cuda" and num_gpus <= 0:
        raise UserError("device cuda needs num_gpus_per_task > 0, or Ray hides the GPUs")
    if step not in (1, 3):
        raise UserError(f"step must be 1 or 3, got {step}")
    if batch < 1:
        raise UserError(f"batch must be at least 1, got {batch}")
    if csv_format not in ("ttball", "blurball"):
        raise UserError(f"unknown csv format {csv_format!r}; use ttball or blurball")
    if retries < 0:
        raise UserError(f"retries must be 0 or more, got {retries}")


def _run_tasks(report: ArchiveReport, todo: list[str], weights: Any, num_cpus: float,
               num_gpus: float, retries: int, progress: bool) -> None:
    import ray
    from tqdm import tqdm

    task = ray.remote(track_one).options(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=0)
    weights_ref = ray.put(weights)
    settings = report.settings
    pending: dict[Any, str] = {}

    def submit(rel: str) -> None:
        report.attempts[rel] = report.attempts.get(rel, 0) + 1
        pending[task.remote(str(report.archive / rel), weights_ref, settings)] = rel

    for rel in todo:
        submit(rel)
    bar = tqdm(total=len(todo), unit="video", desc="archive", disable=not progress,
               dynamic_ncols=True)
    start = time.perf_counter()
    try:
        for rel, outcome in _completed(pending):
            if isinstance(outcome, BaseException):
                if report.attempts[rel] <= retries:
                    submit(rel)
                    continue
                report.failed[rel] = _error_text(outcome)
            else:
                folder = result_dir(report.out, Path(rel))
                write_result(folder, outcome["rows"], outcome["payload"], settings.csv_format)
                report.tracked.append(rel)
                report.frames += len(outcome["rows"])
            report.seconds = time.perf_counter() - start
            bar.update(1)
            bar.set_postfix(frames_per_s=f"{report.frames_per_s:.1f}", failed=len(report.failed))
    finally:
        bar.close()
        report.seconds = time.perf_counter() - start


def _completed(pending: dict[Any, str]) -> Iterator[tuple[str, Any]]:
    """Yield (video, result or exception) as tasks finish; ``pending`` may grow meanwhile."""
    import ray

    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        ref = ready[0]
        rel = pending.pop(ref)
        try:
            yield rel, ray.get(ref)
        except (ray.exceptions.RayError, UserError) as exc:
            yield rel, exc


# --------------------------------------------------------------------------- the CLI's entry


def run_archive(args: Any) -> int:
    """``ttball track --ray ARCHIVE --out OUT``: ``args`` is the track CLI's namespace.

    Reads ``video`` (the archive folder), ``out``, ``address``, ``weights``, ``backend``,
    ``device``, ``step``, ``batch``, ``threshold``, ``dedup_ssim``, ``csv_format``, ``quiet``
    and, when present, ``num_cpus``, ``num_cpus_per_task``, ``num_gpus_per_task``,
    ``retries``, ``reselect``, ``auto_clips``, ``compile_cache`` (refused: the tasks build
    their backends without it).
    Returns the exit code: 0 when every video has a result, 1 when some failed.
    """
    import sys

    if getattr(args, "overlay", False):
        raise UserError("--overlay is not supported with --ray")
    if not getattr(args, "out", None):
        raise UserError("--ray needs --out: the folder that receives one result folder per video")
    if not Path(args.video).is_dir():  # before --backend auto's trials (minutes)
        raise UserError(f"archive {args.video} is not a folder")
    if getattr(args, "compile_cache", None):
        raise UserError("--compile-cache is not supported with --ray")
    archive_videos(Path(args.video), Path(args.out))
    device = getattr(args, "device", "auto")
    gpus = getattr(args, "num_gpus_per_task", None)
    if gpus is None:
        gpus = 1 if device == "cuda" else 0
    backend = _resolve_auto(args, device)
    report = track_archive(
        args.video, args.out, address=getattr(args, "address", None), weights=args.weights,
        backend=backend, device=device, step=args.step, batch=args.batch,
        threshold=args.threshold, dedup_ssim=args.dedup_ssim,
        csv_format=getattr(args, "csv_format", "ttball"), num_gpus_per_task=gpus,
        num_cpus_per_task=getattr(args, "num_cpus_per_task", 1),
        num_cpus=getattr(args, "num_cpus", None), retries=getattr(args, "retries", 2),
        progress=not args.quiet,
    )
    if report.weights_name == "random-init":
        print("warning: no trained weights found; the archive was tracked with freshly "
              "initialised weights, so the detections are meaningless", file=sys.stderr)
    if not args.quiet:
        print(f"videos        {report.total} ({len(report.tracked)} tracked, "
              f"{len(report.skipped)} already done, {len(report.failed)} failed)\n"
              f"speed         {report.frames_per_s:.1f} frames/s over the cluster "
              f"({report.frames} frames, {report.seconds:.1f} s)\n"
              f"written       {Path(args.out) / REPORT_NAME}")
    for video, error in sorted(report.failed.items()):
        print(f"failed: {video}: {error}", file=sys.stderr)
    return 1 if report.failed else 0


def archive_videos(archive: Path, out: Path) -> list[Path]:
    """The videos :func:`track_archive` would track, or a one-line ``UserError`` for a folder
    without any: an empty report would say "0 failed" of nothing. The CLI asks before
    ``--backend auto``'s trials and Ray start."""
    videos = find_videos(archive, exclude=out)
    if videos:
        return videos
    from ttball.frames import IMAGE_SUFFIXES

    images = any(p.suffix.lower() in IMAGE_SUFFIXES for p in archive.iterdir())
    raise UserError(f"archive {archive} holds no videos ({_suffixes()})"
                    + ("; a folder of images is tracked without --ray" if images else ""))


def _suffixes() -> str:
    return ", ".join(sorted(VIDEO_SUFFIXES))


def _resolve_auto(args: Any, device: str) -> str:
    """``--backend auto``: chosen once on the driver (the workers are assumed alike)."""
    import sys

    if args.backend != "auto":
        return str(args.backend)
    from ttball.backends.auto import choose_backend
    from ttball.model import load_model

    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    model = load_model(args.weights)
    return choose_backend(model, device, reselect=getattr(args, "reselect", False), log=log,
                          clips=getattr(args, "auto_clips", None)).backend

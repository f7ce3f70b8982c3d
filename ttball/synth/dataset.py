"""A data set on disk: ``clip_XXXX.mp4`` + ``clip_XXXX.csv`` per clip and ``manifest.json``.

The manifest is the data set's seal. ``write_dataset`` renders every clip into a hidden folder
inside ``out`` (``.synth-partial-*``), so a run cut short (Ctrl-C, an error, out of memory)
leaves ``out`` as it was; only when every clip is done does it remove the old manifest, move
the clips in and write the new manifest (atomically) last. A folder with a manifest therefore
holds exactly the clips it lists, and ``read_manifest`` refuses one without it. While the clips
move in, ``.synth-replacing.json`` names them and the old ones, so that a run cut short there
(milliseconds) leaves clip files that the next run knows as its own to replace.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import cv2

from ttball.errors import UserError
from ttball.hostmem import available_memory, format_bytes
from ttball.results import write_json
from ttball.synth.clip import FOURCC, ClipConfig, clip_seed, plan_clip, write_clip
from ttball.synth.scene import SIZES

MANIFEST = "manifest.json"
REPLACING = ".synth-replacing.json"  # {"clips": [names]}: old and new clips while they swap
GENERATOR = "ttball.synth"
CLIP_FILE = re.compile(r"clip_\d{4,}\.(mp4|csv)")  # what write_dataset writes beside MANIFEST
EXTENSIONS = (".mp4", ".csv")

# Peak memory of one clip's plan_clip + write_clip (tracemalloc, numpy's arrays): 44 B a pixel
# at 200x200 and 2560x1440 (7-9 plain), and 4.8 KB a frame at 64x64 with 5,000-20,000 frames.
RENDER_BYTES_PER_PIXEL, PLAIN_BYTES_PER_PIXEL, RENDER_BYTES_PER_FRAME = 45, 10, 5_000
MANIFEST_BYTES_PER_CLIP = 2_000  # a clip's settings, kept for the manifest (1.7 KB measured)
# The least a clip takes on disk: its CSV (51-55 B a frame) and an mp4v video of at least
# 0.0016 B a pixel a frame (a plain 1920x1080 clip; 0.013-0.18 with players and noise).
DISK_BYTES_PER_FRAME, DISK_BYTES_PER_PIXEL = 50, 0.001
DEFAULT_CONFIG = ClipConfig()


def write_dataset(
    out: Path,
    clips: int,
    seed: int,
    config: ClipConfig = DEFAULT_CONFIG,
    workers: int = 1,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Write ``clips`` clips and ``manifest.json`` into ``out``; returns the manifest. Clip k
    is ``generate_clip(clip_seed(seed, k), config)``. A data set already in ``out`` is replaced
    (its clips that the new one lacks removed) only once the new one is complete; clip files
    that no manifest there lists are refused, not overwritten."""
    out = Path(out)
    check_resources(out, clips, config, workers)
    created = [d for d in (out, *out.parents) if not d.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        old = _owned_clips(out)
        stage = Path(tempfile.mkdtemp(prefix=".synth-partial-", dir=out))
        try:
            jobs = ((str(stage), clip_seed(seed, k), config, f"clip_{k:04d}") for k in range(clips))
            manifest = {
                "generator": GENERATOR,
                "seed": seed,
                "clips": clips,
                "config": {
                    "size": config.size,
                    "fps": config.fps,
                    "frames": config.frames,
                    "plain": config.plain,
                },
                "fourcc": FOURCC,
                "clip_settings": _render(jobs, workers, progress),
            }
            _swap_in(stage, out, manifest, old)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    except BaseException:
        for folder in created:  # innermost first; only those left empty
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    return manifest


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a complete data set in ``folder``; a one-line ``UserError`` for a folder
    without one (a ``ttball synth`` there did not finish) or with clips it lists missing."""
    root = Path(folder)
    path = root / MANIFEST
    if not path.is_file():
        raise UserError(
            f"{root} is not a complete synthetic data set: it has no {MANIFEST} "
            "(did a ttball synth there not finish? run it again)"
        )
    manifest = _parse_manifest(path)
    missing = [
        f"{c['name']}{ext}"
        for c in manifest["clip_settings"]
        for ext in EXTENSIONS
        if not (root / f"{c['name']}{ext}").is_file()
    ]
    if missing:
        raise UserError(
            f"{root} is not a complete synthetic data set: {len(missing)} files its {MANIFEST} "
            f"lists are missing ({missing[0]}{', …' if len(missing) > 1 else ''})"
        )
    return manifest


def check_resources(out: Path, clips: int, config: ClipConfig, workers: int) -> None:
    """One-line ``UserError`` when the data set can't fit: the memory of ``workers`` clips
    rendered at once (plus the manifest), or the least disk space its clips take."""
    largest = config.size or max(SIZES, key=lambda s: s[0] * s[1])
    smallest = config.size or min(SIZES, key=lambda s: s[0] * s[1])
    per_pixel = PLAIN_BYTES_PER_PIXEL if config.plain else RENDER_BYTES_PER_PIXEL
    per_clip = per_pixel * largest[0] * largest[1] + RENDER_BYTES_PER_FRAME * config.frames
    at_once, listed = min(workers, clips), MANIFEST_BYTES_PER_CLIP * clips
    memory = at_once * per_clip + listed
    available = available_memory()
    if available is not None and memory > available:
        raise UserError(
            f"{clips} clips of {largest[0]}x{largest[1]} and {config.frames} frames need about "
            f"{format_bytes(memory)} of memory ({at_once} rendered at once × "
            f"{format_bytes(per_clip)}, and {format_bytes(listed)} for the manifest); "
            f"{format_bytes(available)} is available: ask for a smaller --size, fewer --frames, "
            "--workers or --clips"
        )
    pixels = smallest[0] * smallest[1]
    disk = clips * config.frames * (DISK_BYTES_PER_FRAME + DISK_BYTES_PER_PIXEL * pixels)
    where = next(d for d in (out, *out.parents) if d.exists())
    if os.statvfs(where).f_blocks == 0:  # /proc, /sys: "0.0 B is free" said the wrong thing
        raise UserError(f"{where} holds no files of its own (a kernel file system): write the "
                        "data set somewhere else")
    free = shutil.disk_usage(where).free
    if disk > free:
        raise UserError(
            f"{clips} clips of {config.frames} frames need at least {format_bytes(disk)} of disk; "
            f"{format_bytes(free)} is free where {out} is: ask for fewer --clips or --frames"
        )


def _parse_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not a ttball synth manifest ({exc})") from None
    settings = manifest.get("clip_settings") if isinstance(manifest, dict) else None
    if not (
        isinstance(manifest, dict)
        and manifest.get("generator") == GENERATOR
        and isinstance(settings, list)
        and len(settings) == manifest.get("clips")
        and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in settings)
    ):
        raise UserError(f"{path}: not a complete ttball synth manifest")
    return manifest


def _owned_clips(out: Path) -> set[str]:
    """Names of the clips the data set in ``out`` lists, or a run cut short while moving its
    clips in; a ``UserError`` for clip files that neither lists (someone else's)."""
    path = out / MANIFEST
    owned: set[str] = set()
    if path.exists() or path.is_symlink():
        try:
            owned = {c["name"] for c in _parse_manifest(path)["clip_settings"]}
        except UserError as exc:
            raise UserError(f"{exc}; not replacing it: choose another folder") from None
    try:
        names = json.loads((out / REPLACING).read_text())["clips"]
        owned |= {n for n in names if isinstance(n, str)}
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none (the usual case), or not ours
    strangers = sorted(
        p.name for p in out.iterdir() if CLIP_FILE.fullmatch(p.name) and p.stem not in owned
    )
    if strangers:
        raise UserError(
            f"{out} holds {len(strangers)} clip files that no {MANIFEST} there lists "
            f"({strangers[0]}{', …' if len(strangers) > 1 else ''}); not overwriting them: "
            "move them away or choose another folder"
        )
    return owned


def _swap_in(stage: Path, out: Path, manifest: dict[str, Any], old: set[str]) -> None:
    """Replace the data set in ``out`` by the complete one in ``stage``: the old manifest goes
    first, so a cut here leaves a folder that does not look complete; the new one comes last."""
    new = [c["name"] for c in manifest["clip_settings"]]
    write_json(out / REPLACING, {"clips": sorted(old | set(new))})
    (out / MANIFEST).unlink(missing_ok=True)
    for name in sorted(old - set(new)):
        for ext in EXTENSIONS:
            (out / f"{name}{ext}").unlink(missing_ok=True)
    for name in new:
        for ext in EXTENSIONS:
            os.replace(stage / f"{name}{ext}", out / f"{name}{ext}")
    write_json(out / MANIFEST, manifest)
    (out / REPLACING).unlink()


def _render(
    jobs: Iterator[tuple[str, int, ClipConfig, str]],
    workers: int,
    progress: Callable[[dict[str, Any]], None] | None,
) -> list[dict[str, Any]]:
    """Each job's clip settings, in order. In ``workers`` processes, at most two jobs a worker
    are submitted ahead (``Executor.map`` would build every job first, and wait for all of
    them when one fails). A run cut short (Ctrl-C, a clip that failed) stops the workers: they
    ignore SIGINT, which reached them mid-queue-read and left the pool deadlocked at exit."""
    if workers <= 1:
        return [_report(_make_clip(job), progress) for job in jobs]
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # safe even if the caller has CUDA initialised
    done: list[dict[str, Any]] = []
    pending: deque[Future[dict[str, Any]]] = deque()
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker)
    try:
        for job in jobs:
            pending.append(pool.submit(_make_clip, job))
            if len(pending) >= 2 * workers:
                done.append(_report(pending.popleft().result(), progress))
        while pending:
            done.append(_report(pending.popleft().result(), progress))
    except BaseException:
        _stop(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return done


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now: their clips would be thrown away.
    (``terminate_workers`` is Python 3.14's; before it, the pool's own ``_processes``.)"""
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)  # (which forgets the processes)
    for process in processes:
        process.terminate()


def _init_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers (_stop)
    cv2.setNumThreads(1)  # one clip per process: OpenCV's own threads would only contend


def _make_clip(job: tuple[str, int, ClipConfig, str]) -> dict[str, Any]:
    out, seed, config, name = job
    plan = plan_clip(seed, config)
    write_clip(plan, Path(out), name)
    return {"name": name, **plan.settings}


def _report(
    result: dict[str, Any], progress: Callable[[dict[str, Any]], None] | None
) -> dict[str, Any]:
    if progress is not None:
        progress(result)
    return result

"""Per-frame results and their files: ``track.csv`` (ours), the published tool's CSV, JSON.

One row per frame of the source video. Positions are in original-frame pixels, x to the right
and y down; ``blur_angle_deg`` is the streak's direction in (-90, 90] degrees in those image
coordinates (0 = horizontal, positive = clockwise on screen, i.e. down-right); ``blur_length_px``
is half the streak's extent along that direction. Synthetic ground truth uses the same columns,
so a prediction and a ground truth compare directly.

Every file is written to a temporary name beside the target and renamed into place, so a crash
never leaves half a file.
"""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any

from ttball.errors import UserError

TRACK_COLUMNS = (
    "frame",
    "time_s",
    "visible",
    "x",
    "y",
    "blur_angle_deg",
    "blur_length_px",
    "score",
)
BLURBALL_COLUMNS = ("Frame", "X", "Y", "Visibility", "L", "Theta")


@dataclass(frozen=True)
class FrameResult:
    """The ball in one frame. Invisible frames carry zeros in the geometric fields."""

    frame: int
    time_s: float
    visible: bool
    x: float = 0.0
    y: float = 0.0
    blur_angle_deg: float = 0.0
    blur_length_px: float = 0.0
    score: float = 0.0

    @classmethod
    def invisible(cls, frame: int, time_s: float) -> FrameResult:
        return cls(frame=frame, time_s=time_s, visible=False)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; rename it over ``path`` only if the block succeeds.

    A symlink is written through (its target replaced, the link kept), a file written again
    keeps its permissions, and a path that is no regular file (``/dev/null``, a named pipe) is
    written into: renaming a file over it would replace the device node itself."""
    given = Path(path)
    path = Path(os.path.realpath(given))
    if path.is_dir():
        raise UserError(f"{given} is a folder; cannot write a file in its place")
    if path.exists() and not path.is_file():
        yield from _write_into(path, mode)
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise UserError(f"cannot write to {given.parent}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, mode, newline="" if "b" not in mode else None) as f:
            yield f
        os.chmod(tmp, file_mode(path))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_into(path: Path, mode: str) -> Iterator[IO[Any]]:
    """``atomic_write`` for a device or pipe: straight into it (nothing to rename)."""
    try:
        f = open(path, mode, newline="" if "b" not in mode else None)  # noqa: SIM115
    except OSError as exc:
        raise UserError(f"cannot write to {path}: {exc.strerror or exc}") from None
    try:
        yield f
    finally:
        try:
            f.close()
        except OSError as exc:
            raise UserError(f"cannot write to {path}: {exc.strerror or exc}") from None


def file_mode(path: str | os.PathLike[str]) -> int:
    """The permissions a file written (again) at ``path`` should have: the existing file's, or
    what the umask gives a new one (a temporary file renamed into place has its own, 0600)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _fmt(value: float) -> str:
    return f"{value:.3f}"


def write_track_csv(path: str | os.PathLike[str], rows: Iterable[FrameResult]) -> None:
    with atomic_write(path) as f:
        w = csv.writer(f)
        w.writerow(TRACK_COLUMNS)
        for r in rows:
            w.writerow(
                [
                    r.frame,
                    f"{r.time_s:.6f}",
                    int(r.visible),
                    _fmt(r.x),
                    _fmt(r.y),
                    _fmt(r.blur_angle_deg),
                    _fmt(r.blur_length_px),
                    f"{r.score:.5f}",
                ]
            )


def write_blurball_csv(path: str | os.PathLike[str], rows: Iterable[FrameResult]) -> None:
    """The published video tool's columns: ``Frame, X, Y, Visibility, L, Theta``."""
    with atomic_write(path) as f:
        w = csv.writer(f)
        w.writerow(BLURBALL_COLUMNS)
        for r in rows:
            w.writerow(
                [r.frame, _fmt(r.x), _fmt(r.y), int(r.visible), _fmt(r.blur_length_px),
                 _fmt(r.blur_angle_deg)]
            )


def read_track_csv(path: str | os.PathLike[str]) -> list[FrameResult]:
    """Read ``track.csv`` (ours or synthetic ground truth) or the published tool's CSV."""
    path = Path(path)
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = tuple(reader.fieldnames or ())
            rows = list(reader)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"{path}: not a CSV text file ({exc})") from None
    for line, r in enumerate(rows, start=2):  # a row cut short: its missing cells are None
        if None in r.values():
            raise UserError(f"{path}: line {line} has {sum(v is not None for v in r.values())} "
                            f"of the header's {len(header)} columns")
    if set(TRACK_COLUMNS) <= set(header):
        return [_parse_track_row(r, path) for r in rows]
    if set(BLURBALL_COLUMNS) <= set(header):
        return [_parse_blurball_row(r, path) for r in rows]
    raise UserError(
        f"{path}: unknown CSV columns {', '.join(header) or '(none)'}; expected "
        f"{', '.join(TRACK_COLUMNS)} or {', '.join(BLURBALL_COLUMNS)}"
    )


def _parse_track_row(r: dict[str, str], path: Path) -> FrameResult:
    try:
        visible = _truthy(r["visible"])
        return FrameResult(
            frame=int(r["frame"]),
            time_s=float(r["time_s"] or 0.0),
            visible=visible,
            x=_num(r["x"], visible, "x"),
            y=_num(r["y"], visible, "y"),
            blur_angle_deg=_num(r["blur_angle_deg"]),
            blur_length_px=_num(r["blur_length_px"]),
            score=_num(r["score"]),
        )
    except (ValueError, TypeError) as exc:
        raise UserError(f"{path}: bad row {r}: {exc}") from None


def _parse_blurball_row(r: dict[str, str], path: Path) -> FrameResult:
    try:
        visible = _truthy(r["Visibility"])
        return FrameResult(
            frame=int(r["Frame"]),
            time_s=0.0,
            visible=visible,
            x=_num(r["X"], visible, "X"),
            y=_num(r["Y"], visible, "Y"),
            blur_angle_deg=_num(r["Theta"]),
            blur_length_px=_num(r["L"]),
            score=1.0 if visible else 0.0,
        )
    except (ValueError, TypeError) as exc:
        raise UserError(f"{path}: bad row {r}: {exc}") from None


def _num(text: str | None, needed: bool = False, name: str = "") -> float:
    """A cell's number; empty or NaN is 0 (how an invisible frame's cells were written), except
    where ``needed`` (a visible ball's position: it became (0, 0), a detection in a corner)."""
    if text is None or text.strip() == "" or math.isnan(value := float(text)):
        if needed:
            raise ValueError(f"a visible ball needs a number for {name}, got {text!r}")
        return 0.0
    if math.isinf(value):
        raise ValueError(f"{text.strip()} is not a finite number")
    return value


TRUE, FALSE = {"1", "true", "yes", "1.0"}, {"0", "false", "no", "0.0", ""}


def _truthy(text: str | None) -> bool:
    """A visibility cell: 1 or 0 (a 7 was read as invisible)."""
    cell = (text or "").strip().lower()
    if cell not in TRUE | FALSE:
        raise ValueError(f"visibility must be 0 or 1, got {text!r}")
    return cell in TRUE


def write_json(path: str | os.PathLike[str], payload: Any) -> None:
    """``payload`` as strict JSON: NaN and infinities (no JSON has them) are written as null."""
    with atomic_write(path) as f:
        json.dump(json_safe(payload), f, indent=2, sort_keys=False, default=str, allow_nan=False)
        f.write("\n")


def json_safe(value: Any) -> Any:
    """``value`` with every float that is not finite as None, in dicts, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def result_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(FrameResult))

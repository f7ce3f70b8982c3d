"""Where ttball keeps what it builds once per machine: ``$TTBALL_CACHE_DIR``, else
``~/.cache/ttball`` (exported ONNX files, ``--backend auto``'s choice, the CUDA kernels'
library, the Triton backends' tuning records), and what is in such a folder
(:func:`inventory`) or a ``serve --compile-cache`` one, part by part, for ``ttball cache``
to list and :func:`clear` to delete."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttball.errors import UserError

# name -> (path under the root, what it holds). A part is a file or a folder; clearing deletes
# only these, never the rest of a folder someone pointed --dir at.
PARTS: dict[str, tuple[str, str]] = {
    "auto": ("auto-backend.json", "--backend auto's choice per machine and weights"),
    "tuning": ("tuning", "the Triton backends' tuning records, one per input shape"),
    "kernels": ("kernels", "the CUDA kernels' library built with nvcc (triton-fp16-direct)"),
    "onnx": ("onnx", "exported ONNX files and their .ort forms, OpenVINO's and TensorRT's models"),
    "inductor": ("inductor", "torch.compile's cache (serve/track --compile-cache)"),
    "triton": ("triton", "Triton's compiled kernels (serve/track --compile-cache)"),
    "megacache": ("megacache.bin", "torch.compile's artifacts in one file (--compile-cache)"),
}
RECORD_SUFFIX = ".json"  # a tuning record; its ``.lock`` beside it is not one
# in a --compile-cache folder ttball made or used: `ttball cache clear --dir` deletes parts only
# where it finds this (a user's own onnx/ or kernels/ folder is not a cache part)
MARKER = ".ttball-cache"


def cache_dir() -> Path:
    """The cache's root folder (not created here)."""
    return Path(os.environ.get("TTBALL_CACHE_DIR") or Path.home() / ".cache" / "ttball")


def part_path(name: str, root: str | os.PathLike[str] | None = None) -> Path:
    """Where part ``name`` of :data:`PARTS` lives under ``root`` (default :func:`cache_dir`):
    the one place that names each part's file or folder, for the modules that write them and
    for ``ttball cache``."""
    return (Path(root) if root is not None else cache_dir()) / PARTS[name][0]


def use_compile_cache(root: str | os.PathLike[str]) -> Path:
    """``--compile-cache DIR`` (``serve``, ``track``): torch.compile's inductor and Triton
    caches of this process under ``root`` (unless the environment names them already, which
    then wins); returns ``root`` as an absolute path, for the backends' ``cache_dir``."""
    folder = Path(root).expanduser().resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / MARKER).touch()
    except OSError as exc:
        raise UserError(f"--compile-cache {root}: {exc.strerror or exc}") from None
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(part_path("inductor", folder)))
    os.environ.setdefault("TRITON_CACHE_DIR", str(part_path("triton", folder)))
    return folder


@dataclass
class Part:
    name: str
    path: Path
    about: str
    files: int  # tuning: records only
    bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "about": self.about,
                "files": self.files, "bytes": self.bytes}


def _files(path: Path, name: str) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    found = [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    if name == "tuning":
        found = [p for p in found if p.suffix == RECORD_SUFFIX]
    return found


def inventory(root: Path) -> list[Part]:
    """Each part present under ``root``, with its files and bytes."""
    parts = []
    for name, (_, about) in PARTS.items():
        path = part_path(name, root)
        if path.exists():
            files = _files(path, name)
            parts.append(Part(name, path, about, len(files),
                              sum(p.stat().st_size for p in files)))
    return parts


def tuning_records(root: Path) -> list[dict[str, Any]]:
    """What each tuning record says it was tuned for (``about`` in
    :meth:`ttball.kernels.records.TuningRecords.save`); unreadable ones as ``{"file", "error"}``."""
    out = []
    for path in sorted(part_path("tuning", root).glob(f"*{RECORD_SUFFIX}")):
        try:
            data = json.loads(path.read_text())
            out.append({"file": path.name, **{k: data.get(k) for k in (
                "backend", "shape", "gpu", "driver", "torch", "triton", "written")}})
        except (OSError, ValueError, AttributeError) as exc:
            out.append({"file": path.name, "error": f"{type(exc).__name__}: {exc}"})
    return out


def auto_choices(root: Path) -> dict[str, Any]:
    """``--backend auto``'s cached choices: machine key -> chosen backend and date."""
    try:
        entries = json.loads(part_path("auto", root).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(entries, dict):
        return {}
    return {key: {"backend": e.get("backend"), "date": e.get("date")}
            for key, e in entries.items() if isinstance(e, dict)}


def is_cache(root: Path) -> bool:
    """Whether ``root`` is ttball's: the cache folder (:func:`cache_dir`) or one holding
    :data:`MARKER` (a ``--compile-cache`` folder)."""
    try:
        return (root / MARKER).is_file() or root.resolve() == cache_dir().expanduser().resolve()
    except OSError:
        return False


def clear(root: Path, names: list[str]) -> list[Part]:
    """Delete the parts ``names`` (``"all"``: every part) under ``root``; returns what was
    there. Tuning records go, their lock files stay (a process waiting on one keeps it);
    unknown names raise ValueError before anything is deleted, and so does a ``root`` that is
    not ttball's (:func:`is_cache`): its onnx/ or kernels/ would be someone's own."""
    wanted = list(PARTS) if "all" in names else list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in PARTS]
    if unknown:
        raise ValueError(f"unknown cache part {unknown[0]!r}: choose from {', '.join(PARTS)}, all")
    if not is_cache(root):
        raise ValueError(f"{root} is not a ttball cache (no {MARKER} file, which ttball writes "
                         f"in a --compile-cache folder): nothing deleted")
    present = {p.name: p for p in inventory(root)}
    removed = []
    for name in wanted:
        part = present.get(name)
        if part is None or part.files == 0:  # an empty folder, or tuning's lock files alone
            continue
        if name == "tuning":
            for record in _files(part.path, name):
                record.unlink(missing_ok=True)
        elif part.path.is_dir() and not part.path.is_symlink():
            shutil.rmtree(part.path)
        else:
            part.path.unlink(missing_ok=True)
        removed.append(part)
    return removed

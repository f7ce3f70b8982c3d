"""The tuner's choices kept on disk, so a shape is tuned once per machine and code, not once per
process (issue 9, the cold start of many replicas).

A shape's first call times each step's candidates (:mod:`ttball.kernels.executor`): with the
kernels already compiled that is seconds a shape, but every process did it again, and eight
``serve --ray`` replicas started together all tuned every batch size at once on one GPU, each
timing its candidates among the others' launches. A record holds the configurations a tuning
chose (after ``refine``'s, if it ran); :func:`tuned_or_recorded` takes a shape's record if
there is one, else tunes and writes it, holding a lock on the record meanwhile
(:func:`ttball.filelock.exclusive`), so of several processes starting together one tunes and
the others wait for its record.

A record is found only by everything its choice depends on (:func:`record_key`): the source
of the kernels (this package's files), the plan's shapes (not its weights), the input shape,
the backend's options, the GPU (name, compute capability, SMs), the driver and the torch,
Triton and CUDA versions. A record that does not load (unreadable, another format, a step
count that does not match) is tuned again and rewritten; a recorded configuration that fails
to launch too.
``TTBALL_TUNING_RECORDS=0`` turns records off (:func:`records_wanted`).

Records are tuned by one process alone on the GPU, where before each replica tuned among the
others' launches: whether choices made alone also serve best when eight replicas' kernels
co-run under MPS is measured, not assumed (``docs/benchmarks/h200-2026-12-04g/``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ttball.cachedir import part_path
from ttball.cudasched import driver_version
from ttball.errors import UserError
from ttball.filelock import exclusive
from ttball.results import atomic_write

if TYPE_CHECKING:
    from ttball.kernels.configs import Config

FORMAT = 1
SOURCES = Path(__file__).parent
RECORD, TUNED = "record", "tuned"


@functools.cache
def source_digest(folder: Path = SOURCES) -> str:
    """SHA-256 of the kernels' source files (``*.py``, ``*.cu``) in ``folder``, names and
    contents, in name order."""
    h = hashlib.sha256()
    for path in sorted([*folder.glob("*.py"), *folder.glob("*.cu")]):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def shapes_of(obj: Any) -> Any:
    """``obj`` (a plan, its steps, terms…) as JSON-able data with every tensor replaced by its
    shape and dtype: what a tuning depends on, not the weights' values."""
    if isinstance(obj, torch.Tensor):
        return {"shape": list(obj.shape), "dtype": str(obj.dtype)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"type": type(obj).__name__,
                **{f.name: shapes_of(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    if isinstance(obj, dict):
        return {str(k): shapes_of(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [shapes_of(v) for v in obj]
    return obj


def device_identity(device: torch.device) -> dict[str, Any]:
    """The GPU and the software a tuning ran on (CUDA only)."""
    import triton

    props = torch.cuda.get_device_properties(device)
    return {"gpu": props.name, "capability": list(torch.cuda.get_device_capability(device)),
            "sms": props.multi_processor_count, "driver": driver_version(),
            "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda}


def record_key(plan: Any, shape: Iterable[int], options: dict[str, Any],
               identity: dict[str, Any], sources: str | None = None) -> str:
    """The record's name: a digest of everything the tuner's choice depends on."""
    parts = {"format": FORMAT, "sources": sources or source_digest(), "plan": shapes_of(plan),
             "shape": list(shape), "options": options, "identity": identity}
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def records_wanted() -> bool:
    """``$TTBALL_TUNING_RECORDS``: ``0`` turns tuning records off for every backend of the
    process (and of its Ray replicas, which inherit it), ``1`` or unset leaves them on."""
    env = os.environ.get("TTBALL_TUNING_RECORDS", "").strip()
    if env not in ("", "0", "1"):
        raise UserError(f"TTBALL_TUNING_RECORDS must be 0 or 1, got {env!r}")
    return env != "0"


def records_folder(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where a backend keeps its tuning records: ``cache_dir/tuning`` (``serve
    --compile-cache``, ``bench --cache-dir``), else ``$TTBALL_CACHE_DIR/tuning`` (default
    ``~/.cache/ttball/tuning``, beside the CUDA kernels' library)."""
    return part_path("tuning", Path(cache_dir).expanduser() if cache_dir is not None else None)


class TuningRecords:
    """Records in ``folder`` (``<key>.json``, each with a ``<key>.lock`` beside it)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder).expanduser()

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def load(self, key: str, steps: int) -> list[Config] | None:
        """The recorded configurations, one per step, or None (missing or not loadable)."""
        from ttball.kernels.configs import Config

        try:
            data = json.loads(self.path(key).read_text())
            if data.get("format") != FORMAT or len(data["configs"]) != steps:
                return None
            return [Config(**fields) for fields in data["configs"]]
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None

    def save(self, key: str, configs: list[Config], about: dict[str, Any]) -> None:
        """Write the record atomically (readers see the old one or the new one, never half);
        ``about``: what it was tuned for, kept in the file for people."""
        self.folder.mkdir(parents=True, exist_ok=True)
        data = {"format": FORMAT, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **about,
                "configs": [dataclasses.asdict(c) for c in configs]}
        with atomic_write(self.path(key)) as f:
            json.dump(data, f, indent=1, default=str)


def tuned_or_recorded(records: TuningRecords, key: str, steps: int,
                      adopt: Callable[[list[Config]], object], tune: Callable[[], list[Config]],
                      about: dict[str, Any], timeout_s: float = 900.0) -> tuple[str, str | None]:
    """Under the record's lock: ``adopt`` its configurations if it loads (a first call with
    them), else ``tune`` (a first call that tunes, returning what it chose) and save them.
    Returns ``(RECORD or TUNED, why the record was not used or None)``. Another holder past
    ``timeout_s`` (a stuck process): tune without the lock."""
    with exclusive(records.folder / f"{key}.lock", timeout_s):
        configs = records.load(key, steps)
        why = "no record"
        if configs is not None:
            try:
                adopt(configs)
                return RECORD, None
            except Exception as exc:  # noqa: BLE001  (a kernel that no longer builds or launches)
                why = f"recorded configurations failed: {type(exc).__name__}: {exc}"
        chosen = tune()
        try:
            records.save(key, chosen, about)
        except (OSError, UserError) as exc:  # a read-only cache: tuned all the same
            why = f"{why}; not saved: {exc}"
        return TUNED, why

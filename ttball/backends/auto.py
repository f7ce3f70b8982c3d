"""``--backend auto``: the fastest backend that passes verification on this machine, chosen once.

The first run on a machine (for given weights) verifies each candidate against eager FP32 on
two short bundled synthetic clips (or on ``--auto-clips``, your own footage: a backend can pass
the synthetic clips and still miss on broadcast video), times the ones that pass on one
window, and caches the winner
in ``$TTBALL_CACHE_DIR/auto-backend.json`` (default ``~/.cache/ttball``), keyed by the
processor or GPU, the core count, the torch version and the weights' hash. Later runs read the
cache. ``ttball track --backend auto --reselect`` chooses again.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ttball.backends import base
from ttball.cachedir import part_path
from ttball.errors import UserError

if TYPE_CHECKING:
    from ttball.model import BlurBall

REFERENCE = "eager-fp32"
# Fastest first, by the measurements in docs/benchmarks/cpu-onnx.md and h200.md. INT8 stays a
# candidate: the verification decides whether its flips rule it out. openvino-bf16 does not
# (forty-fifth session): it passed this screen and failed `ttball verify` on full-size clips
# (2 flips in 387 frames) and on the real broadcast rally (1 flip, p99 1.12 px), and on the
# screen itself one clip's p99 was 0.659 px (0.172 on the other): the screen's pooled p99
# passed it by sampling luck. Pin it with --backend after verifying it on your footage.
CANDIDATES: dict[str, tuple[str, ...]] = {
    "cpu": ("openvino-int8", "onnxrt-int8", "openvino-fp32", "onnxrt-fp32-tuned",
            "folded-fp32-cl", REFERENCE),
    # triton-fp16-direct, triton-fp16-branches and triton-fp16: ttball's own kernels, 0.45,
    # 0.47 and 0.60 ms per window at batch 1 on an H200 against 1.15-1.47 ms for the compiled
    # recipes; the first shape compiles for 30-50 s on a machine whose Triton cache is empty,
    # and -direct builds its CUDA extension with nvcc once per machine (unavailable without
    # nvcc) (docs/benchmarks/triton-h200.md).
    "cuda": ("triton-fp16-direct", "triton-fp16-branches", "triton-fp16",
             "compile-reduce-overhead-fp16-autocast",
             "cudagraph-fp16", "eager-fp16-cl", "eager-fp16", REFERENCE),
}
# Two bundled clips of 48 frames (32 windows at step 3). One clip of 24 frames was too few:
# openvino-bf16 passed it but failed the full check on 4 clips (p99 0.93 px; cpu-onnx.md).
CLIPS = 2
CLIP_FRAMES = 48
# Timed calls per candidate: at least 3, then more until 20 or 1 s. Three were too few on a
# GPU: triton-fp16-direct (0.451 ms in `ttball bench`) and -branches (0.474) timed 0.536 and
# 0.534 ms, and the slower one was chosen (twelfth session, h200-2026-12-01d/auto/).
TIMED_CALLS = (3, 20)
TIMED_S = 1.0


@dataclass
class Trial:
    name: str
    status: str  # "chosen", "passed", "failed", "unavailable", "error"
    ms: float | None = None
    reason: str = ""


@dataclass
class Choice:
    backend: str
    key: str
    trials: list[Trial] = field(default_factory=list)
    cached: bool = False


def cache_file() -> Path:
    return part_path("auto")


def _processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(device: torch.device, weights_sha256: str) -> str:
    """What the choice depends on: the chip, the cores, torch, and the weights."""
    chip = torch.cuda.get_device_name(device) if device.type == "cuda" else _processor()
    return "|".join([device.type, chip, f"{os.cpu_count()} cpus", f"torch {torch.__version__}",
                     weights_sha256[:16]])


class Remembered:
    """``backend`` with its outputs kept by input: the reference of the trials, which all
    verify on the same windows. Run again for each trial, eager FP32 took ~22 s a trial over the
    two bundled clips on the 2-core CPU, about half of the first choice's 4 min 26 s. Every other
    attribute is the backend's."""

    def __init__(self, backend: base.Backend) -> None:
        self._backend = backend
        self._outputs: dict[tuple[Any, ...], torch.Tensor] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        import hashlib

        data = batch.detach().contiguous().cpu().numpy().tobytes()
        key = (tuple(batch.shape), str(batch.dtype), hashlib.blake2b(data, digest_size=16).digest())
        if key not in self._outputs:
            self._outputs[key] = self._backend(batch)
        return self._outputs[key].clone()


def clips_digest(clips: Sequence[Path]) -> str:
    """What a choice verified on ``clips`` depends on: their contents (each file of a folder),
    as 16 hex digits; a clip that can't be read is a one-line error."""
    import hashlib

    digest = hashlib.sha256()
    for clip in clips:
        files = sorted(p for p in clip.rglob("*") if p.is_file()) if clip.is_dir() else [clip]
        if not clip.exists() or not files:
            raise UserError(f"--auto-clips {clip}: no such file or folder, or an empty folder")
        for f in files:
            try:
                digest.update(f.name.encode() + b"\0" + f.read_bytes())
            except OSError as exc:
                raise UserError(f"--auto-clips {f}: {exc.strerror or exc}") from None
    return digest.hexdigest()[:16]


def _read_cache(path: Path) -> dict[str, Any]:
    """The cached choices by machine key; a file that is not JSON, or JSON of another shape
    (edited by hand, written by something else), counts as none: the choice is made again."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def _still_valid(entry: dict[str, Any], names: Sequence[str]) -> bool:
    """Whether a cached choice stands for today's candidates ``names``: its backend is still
    registered and one of them, and it was chosen among the same candidates (a release that
    drops one, as openvino-bf16 after it failed verify, or adds one, chooses again; a choice
    cached without its trials is kept if its backend is still a candidate)."""
    backend = entry.get("backend")
    if backend not in base.names() or backend not in names:
        return False
    trials = entry.get("trials", [])
    if not isinstance(trials, list):
        return False
    tried = {t.get("name") for t in trials if isinstance(t, dict)}
    return not tried or tried == set(names)


def _write_cache(path: Path, key: str, choice: Choice) -> None:
    from ttball.results import write_json

    entries = _read_cache(path)
    entries[key] = {"backend": choice.backend, "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "trials": [asdict(t) for t in choice.trials]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, entries)
    except (OSError, UserError):
        pass  # a read-only home only costs a new selection next time


def _time_one_window(backend: base.Backend, height: int, width: int) -> float:
    x = base.random_windows(1, height, width, backend.device)
    backend(x)  # warm-up (compiles where the backend compiles)
    times: list[float] = []
    fewest, most = TIMED_CALLS
    while len(times) < fewest or (len(times) < most and sum(times) < 1e3 * TIMED_S):
        start = time.perf_counter()
        backend(x)
        base.synchronize(backend.device)
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def _try(name: str, model: BlurBall, device: torch.device, reference: base.Backend,
         clips: Sequence[Path], cache_dir: str | os.PathLike[str] | None = None) -> Trial:
    from ttball.verify import VerifyOptions, verify_backend

    reason = base.unavailable_reason(name, device)
    if reason:
        return Trial(name, "unavailable", reason=reason)
    try:
        backend = base.create(name, copy.deepcopy(model), device,
                              **base.cache_options(name, cache_dir))
        if name != REFERENCE:
            report = verify_backend(backend, reference, clips, config=model.config,
                                    options=VerifyOptions(max_frames=CLIP_FRAMES))
            if not report.passed:
                return Trial(name, "failed", reason=report.reason())
        ms = _time_one_window(backend, model.config.input_height, model.config.input_width)
    except UserError as exc:
        return Trial(name, "error", reason=str(exc))
    except (RuntimeError, ValueError, OSError, ImportError) as exc:  # a backend that breaks here
        return Trial(name, "error", reason=f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    return Trial(name, "passed", ms=ms)


def choose_backend(
    model: BlurBall,
    device: str | torch.device = "auto",
    *,
    candidates: Sequence[str] | None = None,
    reselect: bool = False,
    log: Callable[[str], None] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    clips: Sequence[str | os.PathLike[str]] | None = None,
) -> Choice:
    """The cached choice for this machine and weights, or a new one (and cache it).
    ``cache_dir``: handed to the candidates tagged ``disk-cache`` (``serve --compile-cache``),
    so what a trial compiles and tunes (the Triton backends' tuning records among it) is there
    for the backend then built with the same folder; the choice itself stays in
    ``$TTBALL_CACHE_DIR``. ``clips``: verify the candidates on these videos or image folders
    (their first :data:`CLIP_FRAMES` frames; ``--auto-clips``, your own footage) instead of the
    bundled synthetic clips; the choice is then cached for them (by their contents)."""
    from ttball.verify import bundled_reference_clips

    dev = base.resolve_device(device)
    key = machine_key(dev, model.config.sha256 or "unhashed")
    own = [Path(c) for c in clips or ()]
    if own:
        key += "|clips " + clips_digest(own)
    path = cache_file()
    entry = _read_cache(path).get(key)
    names = list(candidates or CANDIDATES.get(dev.type, (REFERENCE,)))
    if entry and not reselect and _still_valid(entry, names):
        try:
            return Choice(entry["backend"], key, [Trial(**t) for t in entry.get("trials", [])],
                          True)
        except TypeError:  # trials of another shape: choose again
            pass
    say = log or (lambda _msg: None)
    say(f"choosing the fastest verified backend for this machine (once; cached in {path})")
    reference = Remembered(base.create(REFERENCE, copy.deepcopy(model), dev))
    on = own or bundled_reference_clips(count=CLIPS, frames=CLIP_FRAMES)
    trials = []
    for name in names:
        trial = _try(name, model, dev, reference, on, cache_dir)
        say(f"  {name}: {trial.status}" + (f", {trial.ms:.1f} ms" if trial.ms else "")
            + (f" ({trial.reason})" if trial.reason else ""))
        trials.append(trial)
    passed = [t for t in trials if t.status == "passed"]
    best = min(passed, key=lambda t: t.ms or float("inf"), default=None)
    if best is None:
        best = Trial(REFERENCE, "passed")
    best.status = "chosen"
    choice = Choice(best.name, key, trials)
    _write_cache(path, key, choice)
    return choice

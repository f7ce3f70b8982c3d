"""``ttball bench``: every selected backend measured the same way, one flat row per batch size.

For each variant and batch size: first-call time (compiles, builds or captures happen here),
then :func:`~ttball.bench.timing.time_calls`, a profile by category, peak memory, agreement
with eager FP32 on the same random input, and the roofline columns. Backends with an on-disk
cache (registry tag ``disk-cache``) get a fresh cache directory, so their first call is cold;
then a second instance over the same directory, after ``torch.compiler.reset()``, gives the
warm first call (what a restarted worker pays). A variant that can't run here or fails is a row
with its status and reason, and the run goes on.
"""

from __future__ import annotations

import copy
import fnmatch
import gc
import logging
import math
import platform
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ttball.backends import base
from ttball.bench import accuracy, memory, profiling, roofline, timing
from ttball.cudasched import driver_version
from ttball.errors import BackendUnavailable, UserError

if TYPE_CHECKING:
    from ttball.model import BlurBall

log = logging.getLogger(__name__)

REFERENCE = "eager-fp32"
FRAMES_PER_WINDOW = 3  # with step 3 every frame is predicted once: frames/s = 3 × windows/s

ROW_KEYS: tuple[str, ...] = (
    "variant",
    "status",
    "reason",
    "description",
    "precision",
    "batch",
    "height",
    "width",
    "device",
    "device_name",
    "torch_version",
    "cuda_version",
    "driver_version",
    "tf32",
    "weights",
    "warmup",
    "groups",
    "calls_per_group",
    "median_ms",
    "min_ms",
    "max_ms",
    "windows_per_s",
    "frames_per_s",
    "speedup_vs_eager_fp32",
    "speedup_vs_same_precision",
    "same_precision_ref",
    "first_call_s",
    "first_call_warm_s",
    "cache",
    "max_abs_err",
    "rel_err",
    "tolerance",
    "within_tolerance",
    # Ball-level agreement with eager FP32 on the bundled reference clips (--verify).
    "verify_passed",
    "verify_flips",
    "verify_p99_px",
    "verify_max_px",
    "verify_peak_moved_with_ball",
    "verify_peak_moved",
    "verify_track_flips",
    "verify_logit_rel",
    "verify_compared",
    "peak_mem_mb",
    "mem_method",
    "kernels_per_call",
    "prof_total_ms",
    *(f"prof_{c}_ms" for c in profiling.CATEGORIES),
    *(f"prof_{c}_n" for c in profiling.CATEGORIES),
    "prof_unit",
    "gflop_per_call",
    "floor_mb_per_call",
    "achieved_tflops",
    "achieved_floor_gbps",
    "ceiling_tflops",
    "ceiling_gbps",
    "flop_share",
    "bw_share",
    "floor_ms",
    # Backends that tune per shape (triton-*): each step's configuration, "step=config; ...".
    "tuned",
)


@dataclass
class BenchConfig:
    """What to run. ``variants`` are registry names (see :func:`select_variants`)."""

    variants: list[str]
    device: torch.device
    batches: tuple[int, ...] = (1,)
    height: int = 288
    width: int = 512
    plan: timing.TimingPlan = timing.FULL
    profile_calls: int = 3
    cache_dir: Path | None = None
    tf32: bool = False
    seed: int = 0
    weights: str = "random-init"
    warm: bool = True  # measure a warm restart for backends with a disk cache
    time_budget_s: float | None = None  # variants not started by then are rows "skipped"
    verify: bool = False  # ball-level agreement on bundled clips; meaningful with trained weights


@dataclass
class BenchResult:
    rows: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)


def select_variants(patterns: list[str] | None, device: torch.device) -> list[str]:
    """Registry names matching ``patterns`` (exact names or globs), in the order given.

    Without patterns: every registered variant in registry order (those that can't run here
    become ``unavailable`` rows). Globs skip option-taking generic entries (tag ``options``)
    and diagnostics (tag ``diagnostic``: ``null``); name them exactly to run them. An unknown
    exact name is an error; a glob that matches nothing is logged and ignored (a family may
    not be installed), unless nothing matches.
    """
    known = base.names()
    concrete = [n for n in known if not {"options", "diagnostic"} & base.spec(n).tags]
    if not patterns:
        return concrete
    chosen: list[str] = []
    empty_globs = []
    for pattern in patterns:
        if any(ch in pattern for ch in "*?["):
            hits = fnmatch.filter(concrete, pattern)
            empty_globs += [] if hits else [pattern]
        elif pattern in known:
            hits = [pattern]
        else:
            raise UserError(f"no backend matches {pattern!r}; known: {', '.join(concrete)}")
        chosen += [h for h in hits if h not in chosen]
    if not chosen:
        raise UserError(
            f"no backend matches {', '.join(map(repr, empty_globs))}; known: {', '.join(concrete)}"
        )
    for pattern in empty_globs:
        log.warning("no backend matches %r; going on with the others", pattern)
    return chosen


def same_precision_reference(name: str) -> str:
    """The eager variant a row's 'same precision' speed-up is taken against."""
    entry = base.spec(name)
    precision = precision_of(name)
    return f"eager-{precision}" + ("-autocast" if "autocast" in entry.tags else "")


def precision_of(name: str) -> str:
    """From the registry tags (fp32/fp16/bf16), else from the name, else fp32."""
    tags = base.spec(name).tags
    for p in accuracy.TOLERANCES:
        if p in tags:
            return p
    for p in accuracy.TOLERANCES:
        if p in name.split("-"):
            return p
    return "fp32"


def _environment(config: BenchConfig) -> dict[str, Any]:
    dev = config.device
    return {
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else _cpu_name(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda or "",
        "driver_version": (driver_version() or "") if dev.type == "cuda" else "",
        "tf32": config.tf32,
        "weights": config.weights,
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({torch.get_num_threads()} threads)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


def _blank(name: str, config: BenchConfig, env: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(ROW_KEYS)
    entry = base.spec(name)
    row.update(env)
    row.update(
        variant=name,
        description=entry.description,
        precision=precision_of(name),
        height=config.height,
        width=config.width,
        warmup=config.plan.warmup,
        groups=config.plan.groups,
        calls_per_group=config.plan.calls,
        tolerance=accuracy.tolerance(precision_of(name)),
    )
    return row


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class _Run:
    """One bench run's state: model, inputs, reference outputs, ceilings, the cache root."""

    def __init__(self, config: BenchConfig, model: BlurBall, cache_root: Path) -> None:
        self.config, self.model, self.cache_root = config, model, cache_root
        self.env = _environment(config)
        self.cost = roofline.network_cost(config.height, config.width)
        self.ceilings = roofline.Ceilings(config.device)
        gen = torch.Generator().manual_seed(config.seed)
        self.inputs = {
            b: base.random_windows(b, config.height, config.width, config.device, gen)
            for b in config.batches
        }
        self.reference: dict[int, torch.Tensor] = {}

    def options(self, name: str) -> dict[str, Any]:
        """``cache_dir`` for backends with a disk cache: one directory per variant."""
        return base.cache_options(name, self.cache_root / name)

    def create(self, name: str) -> base.Backend:
        return base.create(name, self.model, self.config.device, **self.options(name))

    def reference_outputs(self) -> None:
        """Eager FP32 on every batch's input (also warms the reference for its own row)."""
        backend = base.create(REFERENCE, self.model, self.config.device)
        for b, x in self.inputs.items():
            self.reference[b] = backend(x).detach().clone()
        del backend
        if self.config.verify:
            from ttball.verify import bundled_reference_clips

            self.verify_clips = bundled_reference_clips()
            # Its own copy: eager FP32 moves the model it is given to its device.
            self.verify_reference = base.create(
                REFERENCE, copy.deepcopy(self.model), self.config.device
            )

    def measure(self, backend: base.Backend, name: str, batch: int) -> dict[str, Any]:
        cfg, x = self.config, self.inputs[batch]
        row = _blank(name, cfg, self.env)
        row["batch"] = batch

        def fn() -> torch.Tensor:
            return backend(x)

        row["first_call_s"], out = timing.first_call(fn, cfg.device)
        row.update(accuracy.agreement(out, self.reference[batch]))
        row["within_tolerance"] = bool(row["rel_err"] <= row["tolerance"])
        del out
        if cfg.verify:
            from ttball.verify import VerifyOptions, agreement_columns

            row.update(
                agreement_columns(
                    backend, self.verify_reference, self.verify_clips,
                    config=self.model.config, options=VerifyOptions(batch=batch, tf32=cfg.tf32),
                )
            )
        row.update(timing.time_calls(fn, cfg.device, cfg.plan))
        if cfg.profile_calls > 0:
            row.update(profiling.profile_calls(fn, cfg.device, cfg.profile_calls))
        row.update(memory.measure_peak(fn, cfg.device))
        row["windows_per_s"] = batch * 1e3 / row["median_ms"]
        row["frames_per_s"] = FRAMES_PER_WINDOW * row["windows_per_s"]
        row.update(
            roofline.roofline_columns(
                self.cost, batch, row["precision"], row["median_ms"], self.ceilings
            )
        )
        row["status"] = "ok"
        return row


def _fresh_state(device: torch.device) -> None:
    """Forget compiled graphs and cached blocks between variants (also the warm-restart step)."""
    torch.compiler.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _run_variant(
    run: _Run, name: str, saved: Callable[[list[dict[str, Any]]], None]
) -> list[dict[str, Any]]:
    """One variant's rows, one per batch size; ``saved`` gets them after each batch size."""
    cfg = run.config
    reason = base.unavailable_reason(name, cfg.device)
    if reason:
        return [_failed(run, name, None, "unavailable", reason)]
    cache = run.cache_root / name
    cache_state = "warm-start" if cache.exists() and any(cache.iterdir()) else "cold"
    try:
        backend = run.create(name)
    except BackendUnavailable as exc:
        return [_failed(run, name, None, "unavailable", str(exc))]
    except Exception as exc:  # noqa: BLE001  (a broken variant is a row, not the end of the run)
        return [_failed(run, name, None, "failed", _reason(exc))]
    rows = []
    for b in cfg.batches:
        try:
            row = run.measure(backend, name, b)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            row = _failed(run, name, b, "failed", _reason(exc))
        if run.options(name):
            row["cache"] = cache_state
        tuned = getattr(backend, "tuned", None)
        if tuned is not None and row["status"] == "ok":
            row["tuned"] = tuned(tuple(run.inputs[b].shape))
        rows.append(row)
        saved(rows)
    del backend
    _fresh_state(cfg.device)
    if cfg.warm and run.options(name) and any(r["status"] == "ok" for r in rows):
        _measure_warm(run, name, rows)
    return rows


def _measure_warm(run: _Run, name: str, rows: list[dict[str, Any]]) -> None:
    """A second instance on the first one's cache directory: first call per batch size."""
    cfg = run.config
    try:
        backend = run.create(name)
        for row in rows:
            if row["status"] == "ok":
                x = run.inputs[row["batch"]]
                row["first_call_warm_s"], _ = timing.first_call(partial(backend, x), cfg.device)
        del backend
    except Exception as exc:  # noqa: BLE001
        for row in rows:
            row["reason"] = f"warm restart failed: {_reason(exc)}"
    _fresh_state(cfg.device)


def _failed(run: _Run, name: str, batch: int | None, status: str, reason: str) -> dict[str, Any]:
    row = _blank(name, run.config, run.env)
    row.update(batch=batch, status=status, reason=reason)
    return row


def _speedups(rows: list[dict[str, Any]]) -> None:
    ms = {(r["variant"], r["batch"]): r["median_ms"] for r in rows if r["status"] == "ok"}
    for r in rows:
        if r["status"] != "ok":
            continue
        ref = same_precision_reference(r["variant"])
        r["same_precision_ref"] = ref
        for key, base_name in (
            ("speedup_vs_eager_fp32", REFERENCE),
            ("speedup_vs_same_precision", ref),
        ):
            base_ms = ms.get((base_name, r["batch"]))
            r[key] = base_ms / r["median_ms"] if base_ms else None


@contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _meta(run: _Run) -> dict[str, Any]:
    cfg = run.config
    return {
        **run.env,
        "ceilings": run.ceilings.as_dict(),
        "gflop_per_window": run.cost.flops / 1e9,
        "floor_mb_per_window_fp16": run.cost.floor_bytes("fp16") / 1e6,
        "height": cfg.height,
        "width": cfg.width,
        "batches": list(cfg.batches),
        "plan": asdict(cfg.plan),
        "warm_restart": cfg.warm,
        "time_budget_s": cfg.time_budget_s,
    }


def _finite(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for r in rows:
        for k, v in r.items():
            if isinstance(v, float) and not math.isfinite(v):
                r[k] = None
    return rows


def run_bench(
    config: BenchConfig,
    model: BlurBall,
    progress: Callable[[Iterator[str]], Iterator[str]] | None = None,
    on_rows: Callable[[BenchResult], None] | None = None,
) -> BenchResult:
    """Measure ``config.variants`` on ``model``; rows in variant order, then batch order.

    ``on_rows`` gets the rows so far after each batch size of each variant, so that a run cut
    short (a compile of minutes per batch size, a machine's time limit) keeps what it measured.
    """
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ttball-bench-cache-") as tmp:
        cache_root = config.cache_dir or Path(tmp)
        with _tf32(config.tf32), torch.inference_mode():
            run = _Run(config, model, cache_root)
            run.reference_outputs()
            names = iter(config.variants)
            rows: list[dict[str, Any]] = []

            def saved(variant_rows: list[dict[str, Any]]) -> None:
                if on_rows:
                    so_far = rows + variant_rows
                    _speedups(so_far)
                    on_rows(BenchResult(_finite(list(so_far)), _meta(run)))

            for name in progress(names) if progress else names:
                spent = time.perf_counter() - start
                if config.time_budget_s is not None and spent > config.time_budget_s:
                    rows.append(
                        _failed(
                            run,
                            name,
                            None,
                            "skipped",
                            f"time budget of {config.time_budget_s:.0f} s spent",
                        )
                    )
                    continue
                variant_rows = _run_variant(run, name, saved)
                rows += variant_rows
                saved([])  # rows without a batch size, and the warm restart's column
            _speedups(rows)
            result = BenchResult(_finite(rows), _meta(run))
    return result

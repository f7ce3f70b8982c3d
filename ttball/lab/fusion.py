"""Why fusion pays: the four small experiments of the seed article's section 2, on this machine.

1. Folding BatchNorm into the preceding convolution: same output, time barely changes.
2. The elementwise chain ``relu(x * 1.5 + 0.5) * 0.9``: eager (four kernels), hand-written
   in-place (four kernels, one allocation) and ``torch.compile`` (one fused kernel); plus the
   first compile's time with an empty and with a warm on-disk cache, each in a fresh process.
3. Per-call overhead: one addition against the same work split into many small calls.
4. Bytes moved by each variant of the chain and the bandwidth each reaches.

Times are medians of ``repeats`` samples taken after warm-up; a sample averages as many calls
as last ``min_sample_s``. They cover the calls alone: inputs are made, and on CUDA already on
the device, before timing starts; CUDA work is timed with events between synchronizations.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ttball.errors import BackendUnavailable
from ttball.passes.fold_bn import fold_conv_bn

# A sample lasts at least 50 ms, so that the timer's resolution and a one-off 1 ms stall
# (a scheduler tick) stay under 2% of it.
MIN_SAMPLE_S = 0.05
WARMUP_CALLS = 2
# Thresholds of the verdicts, each tied to the seed's own figures:
NOISE_PCT = 5.0  # the seed's two folding runs differed by 2.6%: ~2× that is noise
FUSION_MIN_SPEEDUP = 2.0  # half the 4× byte ratio (seed: 4.1×)
COMPILED_OVER_INPLACE_MIN = 1.5  # seed: in-place takes 3.1× the compiled time
CACHE_MIN_SPEEDUP = 2.0  # seed: a warm cache cuts the first compile 9×
SPLIT_MIN_RATIO = 2.0  # seed: 1,000 calls cost 6.8× one call
BANDWIDTH_TOLERANCE = 1.5  # seed: compiled and eager reach the same GB/s (ratio 1.01)
FOLD_REL_TOL = 1e-5  # ~100 float32 ulps of the output's largest value

# Environment variables that change the figures; the report records those that are set.
TIMING_ENV = ("THP_MEM_ALLOC_ENABLE", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_FX_GRAPH_CACHE")

# Kernel passes over the array (each reads it once and writes it once) and fresh arrays
# allocated per call of each variant of the chain.
PASSES = {"eager": 4, "inplace": 4, "compiled": 1}
FRESH_ARRAYS = {"eager": 4, "inplace": 1, "compiled": 1}

# The seed's measurements: laptop CPU, one thread, median of 7 (section 2, code/03_fusion.py).
SEED: dict[str, float | None] = {
    "fold.max_abs_diff": 4.77e-06,
    "fold.unfused_ms": 5.80,
    "fold.folded_ms": 5.80,
    "chain.eager_ms": 9.7,
    "chain.compiled_ms": 2.4,
    "chain.inplace_ms": 7.4,
    "chain.speedup": 4.1,
    "chain.max_abs_diff": 0.0,
    "compile.cold_s": 5.4,
    "compile.warm_s": 0.6,
    "overhead.one_call_ms": 0.13,
    "overhead.split_ms": 0.88,
}


@dataclass(frozen=True)
class FusionSizes:
    """Problem sizes; the defaults are the seed's. The conv input is float32 [1, conv_in, height,
    width]; the chain runs on float32 [chain_numel]; the addition on add_calls × add_slice."""

    conv_in: int = 32
    conv_out: int = 64
    kernel: int = 3
    height: int = 144
    width: int = 256
    chain_numel: int = 2**24
    add_calls: int = 1000
    add_slice: int = 1024

    def __post_init__(self) -> None:
        bad = [k for k, v in asdict(self).items() if not (isinstance(v, int) and v > 0)]
        if bad:
            raise ValueError(f"sizes must be positive integers: {', '.join(bad)}")

    def scaled(self, factor: float) -> FusionSizes:
        """Element counts times ``factor`` (conv sides times its square root); channels kept."""
        side = math.sqrt(factor)
        return replace(
            self,
            height=max(8, round(self.height * side)),
            width=max(8, round(self.width * side)),
            chain_numel=max(1024, round(self.chain_numel * factor)),
            add_calls=max(10, round(self.add_calls * factor)),
        )


# ---------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call: median, min and max over ``repeats`` samples."""

    median_ms: float
    min_ms: float
    max_ms: float
    repeats: int
    calls_per_sample: int


def measure(
    fn: Callable[[], object], device: torch.device, repeats: int, min_sample_s: float = MIN_SAMPLE_S
) -> Timing:
    """Time ``fn()`` after ``WARMUP_CALLS`` calls; one more call sizes the samples."""
    for _ in range(WARMUP_CALLS):
        fn()
    once = _seconds(fn, 1, device)
    number = max(1, min(100_000, math.ceil(min_sample_s / max(once, 1e-7))))
    samples = sorted(_seconds(fn, number, device) / number * 1e3 for _ in range(repeats))
    return Timing(statistics.median(samples), samples[0], samples[-1], repeats, number)


def _seconds(fn: Callable[[], object], number: int, device: torch.device) -> float:
    if device.type == "cuda":
        return _cuda_seconds(fn, number)
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return time.perf_counter() - start


def _cuda_seconds(fn: Callable[[], object], number: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(number):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------- 1. BN folding


@dataclass(frozen=True)
class FoldResult:
    max_abs_diff: float
    max_rel_diff: float  # max |diff| / max |conv+BN output|
    unfused: Timing
    folded: Timing
    bn_alone: Timing  # the BatchNorm on the conv's output: roughly what folding saves


def make_conv_bn(sizes: FusionSizes, device: torch.device, seed: int = 0) -> nn.Sequential:
    """Conv2d(conv_in → conv_out, kernel × kernel, same padding, no bias) + BatchNorm2d in eval
    mode, with random running statistics and affine parameters so that folding has work to do.
    Running variances lie in [0.05, 2.05], small enough that a fold forgetting ε is caught."""
    g = torch.Generator().manual_seed(seed)
    c = sizes.conv_out
    conv = nn.Conv2d(sizes.conv_in, c, sizes.kernel, padding=sizes.kernel // 2, bias=False)
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * 0.1)
        bn.running_mean.copy_(torch.randn(c, generator=g))
        bn.running_var.copy_(torch.rand(c, generator=g) * 2 + 0.05)
        bn.weight.copy_(torch.rand(c, generator=g) + 0.5)
        bn.bias.copy_(torch.randn(c, generator=g))
    return nn.Sequential(conv, bn).eval().to(device)


def fold_experiment(
    sizes: FusionSizes, device: torch.device, repeats: int, min_sample_s: float = MIN_SAMPLE_S
) -> FoldResult:
    model = make_conv_bn(sizes, device)
    folded = fold_conv_bn(model[0], model[1])  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, sizes.conv_in, sizes.height, sizes.width, generator=g).to(device)
    ref, out, conv_out = model(x), folded(x), model[0](x)
    diff = (ref - out).abs().max().item()
    return FoldResult(
        max_abs_diff=diff,
        max_rel_diff=diff / max(ref.abs().max().item(), 1e-30),
        unfused=measure(lambda: model(x), device, repeats, min_sample_s),
        folded=measure(lambda: folded(x), device, repeats, min_sample_s),
        bn_alone=measure(lambda: model[1](conv_out), device, repeats, min_sample_s),
    )


# ---------------------------------------------------------------- 2. elementwise chain


def chain(x: torch.Tensor) -> torch.Tensor:
    """``relu(x·1.5 + 0.5)·0.9`` as eager runs it: four kernels, four fresh arrays."""
    return torch.relu(x * 1.5 + 0.5) * 0.9


def chain_inplace(x: torch.Tensor) -> torch.Tensor:
    """The same chain by hand: one fresh array, then three in-place passes over it."""
    y = x * 1.5
    y.add_(0.5)
    y.relu_()
    return y.mul_(0.9)


@cache
def compiled_chain() -> Callable[[torch.Tensor], torch.Tensor]:
    """``torch.compile(chain)``, built once per process so that repeated runs reuse it."""
    return torch.compile(chain, dynamic=False)  # type: ignore[return-value]


@dataclass(frozen=True)
class ChainResult:
    numel: int
    itemsize: int
    eager: Timing
    inplace: Timing
    compiled: Timing
    compiled_max_abs_diff: float  # against eager
    inplace_max_abs_diff: float
    fresh_fill: Timing  # torch.empty_like(x).fill_(1): allocate, first-touch, write
    reused_fill: Timing  # buffer.fill_(1) on an array allocated once: write only

    @property
    def fresh_array_ms(self) -> float:
        """Cost of allocating one array of this size and touching its pages the first time."""
        return max(0.0, self.fresh_fill.median_ms - self.reused_fill.median_ms)


def chain_input(numel: int, device: torch.device) -> torch.Tensor:
    """float32 [numel], standard normal, the same on every run."""
    return torch.randn(numel, generator=torch.Generator().manual_seed(2)).to(device)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def chain_experiment(
    numel: int, device: torch.device, repeats: int, min_sample_s: float = MIN_SAMPLE_S
) -> ChainResult:
    x = chain_input(numel, device)
    fused = compiled_chain()
    ref = chain(x)
    buffer = torch.empty_like(x)

    def timed(fn: Callable[[], object]) -> Timing:
        return measure(fn, device, repeats, min_sample_s)

    return ChainResult(
        numel=numel,
        itemsize=x.element_size(),
        compiled_max_abs_diff=_max_diff(fused(x), ref),
        inplace_max_abs_diff=_max_diff(chain_inplace(x), ref),
        eager=timed(lambda: chain(x)),
        inplace=timed(lambda: chain_inplace(x)),
        compiled=timed(lambda: fused(x)),
        fresh_fill=timed(lambda: torch.empty_like(x).fill_(1.0)),
        reused_fill=timed(lambda: buffer.fill_(1.0)),
    )


def bytes_moved(variant: str, numel: int, itemsize: int = 4) -> int:
    """Bytes read plus written by one call of a chain variant: each pass reads and writes once."""
    return PASSES[variant] * 2 * numel * itemsize


# ---------------------------------------------------------------- first compile, cold and warm


@dataclass(frozen=True)
class CompileCacheResult:
    """Seconds of the first call of a freshly compiled chain (trace, generate, build, run once)
    in a fresh process whose TORCHINDUCTOR_CACHE_DIR starts empty (cold), then in a second
    fresh process on the same directory (warm). ``*_files_before``: files in it before each."""

    cold_s: float
    warm_s: float
    cold_files_before: int
    warm_files_before: int


def first_compile_seconds(numel: int, device: torch.device, threads: int) -> float:
    """Run in a fresh process: from ``torch.compile`` to the first result, synchronized."""
    torch.set_num_threads(threads)
    with torch.inference_mode():
        x = chain_input(numel, device)
        fn = torch.compile(chain, dynamic=False)
        _sync(device)
        start = time.perf_counter()
        fn(x)
        _sync(device)
        return time.perf_counter() - start


def probe_main(argv: Sequence[str]) -> None:
    """Entry of the child process: ``numel device threads`` in, one JSON line out."""
    numel, device, threads = int(argv[0]), torch.device(argv[1]), int(argv[2])
    print(json.dumps({"first_call_s": first_compile_seconds(numel, device, threads)}))


def compile_cache_experiment(
    numel: int, device: torch.device, threads: int, timeout_s: float = 600
) -> CompileCacheResult:
    with tempfile.TemporaryDirectory(prefix="ttball-inductor-") as cache_dir:
        cold_before = _count_files(cache_dir)
        cold = _probe(cache_dir, numel, device, threads, timeout_s)
        warm_before = _count_files(cache_dir)
        warm = _probe(cache_dir, numel, device, threads, timeout_s)
    return CompileCacheResult(cold, warm, cold_before, warm_before)


def _count_files(root: str) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def _probe(cache_dir: str, numel: int, device: torch.device, threads: int, timeout_s: float) -> float:
    package_root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": cache_dir,
        "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton"),
        "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
    }
    code = "import sys; from ttball.lab.fusion import probe_main; probe_main(sys.argv[1:])"
    cmd = [sys.executable, "-c", code, str(numel), str(device), str(threads)]
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise BackendUnavailable(f"torch.compile took over {timeout_s:.0f} s in a fresh process")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BackendUnavailable(f"torch.compile failed in a fresh process: {last}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["first_call_s"])


# ---------------------------------------------------------------- 3. per-call overhead


@dataclass(frozen=True)
class OverheadResult:
    calls: int
    slice_len: int
    one_call: Timing  # torch.add(a, b, out=out) over calls × slice_len elements
    split: Timing  # the same additions as `calls` calls over precomputed slice views

    @property
    def per_call_us(self) -> float:
        return (self.split.median_ms - self.one_call.median_ms) * 1e3 / self.calls


def overhead_experiment(
    calls: int, slice_len: int, device: torch.device, repeats: int,
    min_sample_s: float = MIN_SAMPLE_S,
) -> OverheadResult:
    n = calls * slice_len
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(n, generator=g).to(device) for _ in range(2))
    out = torch.empty_like(a)
    views = [(a[i:i + slice_len], b[i:i + slice_len], out[i:i + slice_len])
             for i in range(0, n, slice_len)]

    def split() -> None:
        for x, y, o in views:
            torch.add(x, y, out=o)

    return OverheadResult(
        calls=calls,
        slice_len=slice_len,
        one_call=measure(lambda: torch.add(a, b, out=out), device, repeats, min_sample_s),
        split=measure(split, device, repeats, min_sample_s),
    )


# ---------------------------------------------------------------- the report


@dataclass(frozen=True)
class FusionReport:
    machine: dict[str, Any]
    sizes: FusionSizes
    fold: FoldResult
    chain: ChainResult
    overhead: OverheadResult
    compile_cache: CompileCacheResult | None  # None: not measured

    def measured(self) -> dict[str, float | None]:
        """The raw figures, keyed like :data:`SEED`."""
        c, cc = self.chain, self.compile_cache
        return {
            "fold.max_abs_diff": self.fold.max_abs_diff,
            "fold.max_rel_diff": self.fold.max_rel_diff,
            "fold.unfused_ms": self.fold.unfused.median_ms,
            "fold.folded_ms": self.fold.folded.median_ms,
            "fold.bn_ms": self.fold.bn_alone.median_ms,
            "chain.eager_ms": c.eager.median_ms,
            "chain.compiled_ms": c.compiled.median_ms,
            "chain.inplace_ms": c.inplace.median_ms,
            "chain.max_abs_diff": c.compiled_max_abs_diff,
            "chain.inplace_max_abs_diff": c.inplace_max_abs_diff,
            "compile.cold_s": cc.cold_s if cc else None,
            "compile.warm_s": cc.warm_s if cc else None,
            "overhead.one_call_ms": self.overhead.one_call.median_ms,
            "overhead.split_ms": self.overhead.split.median_ms,
            "traffic.fresh_array_ms": c.fresh_array_ms,
        }

    def figures(self) -> dict[str, float | None]:
        return derive(self.measured(), self.sizes, self.chain.itemsize)

    def rows(self) -> list[dict[str, Any]]:
        return figure_rows(self.figures(), seed_figures())

    def verdicts(self) -> list[str]:
        return verdicts(self.figures(), self.sizes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "sizes": asdict(self.sizes),
            "seed_sizes": self.sizes == FusionSizes(),
            "experiments": {
                "fold": asdict(self.fold),
                "chain": {**asdict(self.chain), "fresh_array_ms": self.chain.fresh_array_ms},
                "compile_cache": asdict(self.compile_cache) if self.compile_cache else None,
                "overhead": {**asdict(self.overhead), "per_call_us": self.overhead.per_call_us},
                "traffic": traffic_rows(self.figures()),
            },
            "figures": self.rows(),
            "verdicts": self.verdicts(),
        }


def _q(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def derive(
    base: dict[str, float | None], sizes: FusionSizes, itemsize: int = 4
) -> dict[str, float | None]:
    """``base`` plus the figures computed from it, by one formula for ours and the seed's; a
    figure already in ``base`` (one the article printed) is kept."""
    new: dict[str, float | None] = {}
    change = _q(base["fold.folded_ms"], base["fold.unfused_ms"])
    new["fold.change_pct"] = None if change is None else (change - 1) * 100
    new["chain.speedup"] = _q(base["chain.eager_ms"], base["chain.compiled_ms"])
    new["chain.inplace_speedup"] = _q(base["chain.eager_ms"], base["chain.inplace_ms"])
    new["chain.compiled_over_inplace"] = _q(base["chain.inplace_ms"], base["chain.compiled_ms"])
    new["compile.cache_speedup"] = _q(base["compile.cold_s"], base["compile.warm_s"])
    one, split = base["overhead.one_call_ms"], base["overhead.split_ms"]
    new["overhead.split_ratio"] = _q(split, one)
    new["overhead.per_call_us"] = None if one is None or split is None else (
        (split - one) * 1e3 / sizes.add_calls)
    fresh = base.get("traffic.fresh_array_ms")
    for variant in PASSES:
        mb, ms = bytes_moved(variant, sizes.chain_numel, itemsize) / 1e6, base[f"chain.{variant}_ms"]
        new[f"traffic.{variant}_mb"] = mb
        new[f"traffic.{variant}_gbps"] = _q(mb, ms)
        net_ms = None if fresh is None or ms is None else ms - FRESH_ARRAYS[variant] * fresh
        new[f"traffic.{variant}_net_gbps"] = _q(mb, net_ms) if net_ms and net_ms > 0 else None
    return {**new, **base}


def seed_figures() -> dict[str, float | None]:
    return derive(SEED, FusionSizes())


# (key, experiment, label, unit) in the order of the table.
FIGURES: tuple[tuple[str, str, str, str], ...] = (
    ("fold.max_abs_diff", "1 fold BN", "max |conv+BN − folded|", ""),
    ("fold.max_rel_diff", "1 fold BN", "  relative to max |output|", ""),
    ("fold.unfused_ms", "1 fold BN", "conv + BN", "ms"),
    ("fold.folded_ms", "1 fold BN", "folded conv", "ms"),
    ("fold.change_pct", "1 fold BN", "time change", "%"),
    ("fold.bn_ms", "1 fold BN", "BN alone, on the conv's output", "ms"),
    ("chain.eager_ms", "2 chain", "eager (4 kernels)", "ms"),
    ("chain.compiled_ms", "2 chain", "torch.compile (1 kernel)", "ms"),
    ("chain.speedup", "2 chain", "compiled speed-up", "×"),
    ("chain.max_abs_diff", "2 chain", "max |compiled − eager|", ""),
    ("chain.inplace_ms", "2 chain", "in-place by hand", "ms"),
    ("chain.inplace_max_abs_diff", "2 chain", "max |in-place − eager|", ""),
    ("chain.compiled_over_inplace", "2 chain", "compiled vs in-place", "×"),
    ("compile.cold_s", "2 chain", "first compile, empty cache", "s"),
    ("compile.warm_s", "2 chain", "first compile, warm cache", "s"),
    ("overhead.one_call_ms", "3 overhead", "one addition", "ms"),
    ("overhead.split_ms", "3 overhead", "same, split into calls", "ms"),
    ("overhead.per_call_us", "3 overhead", "overhead per call", "µs"),
    ("traffic.eager_mb", "4 traffic", "eager: bytes moved", "MB"),
    ("traffic.inplace_mb", "4 traffic", "in-place: bytes moved", "MB"),
    ("traffic.compiled_mb", "4 traffic", "compiled: bytes moved", "MB"),
    ("traffic.eager_gbps", "4 traffic", "eager bandwidth", "GB/s"),
    ("traffic.inplace_gbps", "4 traffic", "in-place bandwidth", "GB/s"),
    ("traffic.compiled_gbps", "4 traffic", "compiled bandwidth", "GB/s"),
    ("traffic.fresh_array_ms", "4 traffic", "allocate + first touch 1 array", "ms"),
    *((f"traffic.{v}_net_gbps", "4 traffic", f"{name}, net of {FRESH_ARRAYS[v]} allocation(s)",
       "GB/s") for v, name in (("eager", "eager"), ("inplace", "in-place"), ("compiled", "compiled"))),
)


def figure_rows(
    here: dict[str, float | None], seed: dict[str, float | None]
) -> list[dict[str, Any]]:
    """One flat row per figure: here, the seed's (``seed_derived``: computed from its times and
    sizes, not printed in the article) and here/seed."""
    return [
        {
            "key": key, "experiment": exp, "label": label, "unit": unit,
            "here": here.get(key), "seed": seed.get(key), "seed_derived": key not in SEED,
            "ratio": _q(here.get(key), seed.get(key)),
        }
        for key, exp, label, unit in FIGURES
    ]


def traffic_rows(f: dict[str, float | None]) -> list[dict[str, Any]]:
    return [
        {"variant": v, "passes": PASSES[v], "fresh_arrays": FRESH_ARRAYS[v],
         "mb_moved": f[f"traffic.{v}_mb"], "ms": f[f"chain.{v}_ms"],
         "gb_per_s": f[f"traffic.{v}_gbps"], "net_gb_per_s": f[f"traffic.{v}_net_gbps"]}
        for v in PASSES
    ]


# ---------------------------------------------------------------- verdicts


def _holds(ok: bool) -> str:
    return "holds" if ok else "does not hold"


def _g(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def fold_verdict(f: dict[str, Any], s: dict[str, Any]) -> str:
    rel, change = f["fold.max_rel_diff"], f["fold.change_pct"]
    head = (f"1. Folding BN: max |diff| {f['fold.max_abs_diff']:.2e} ({rel:.1e} of the output), "
            f"{_g(f['fold.unfused_ms'])} → {_g(f['fold.folded_ms'])} ms ({change:+.1f}%; seed "
            f"{s['fold.change_pct']:+.1f}%); BN alone {_g(f.get('fold.bn_ms'))} ms")
    if rel >= FOLD_REL_TOL:
        return f"{head} → does not hold: the folded conv differs beyond FP32 rounding."
    if abs(change) < NOISE_PCT:
        return f"{head} → holds: same output, and BN is small beside the conv (<{NOISE_PCT:g}%)."
    why = "BN is not negligible beside this conv" if change < 0 else "the folded conv is slower"
    return f"{head} → does not hold: folding changes time by {change:+.0f}%, {why}."


def chain_verdict(f: dict[str, Any], s: dict[str, Any]) -> str:
    sp, diff = f["chain.speedup"], f["chain.max_abs_diff"]
    ok = diff == 0 and sp >= FUSION_MIN_SPEEDUP
    why = ("one fused pass instead of four" if ok else
           "results differ" if diff != 0 else f"the speed-up is under {FUSION_MIN_SPEEDUP:g}×")
    return (f"2. Chain: torch.compile gives a {sp:.1f}× speed-up over eager (seed "
            f"{s['chain.speedup']:.1f}×), max |diff| {diff:g} → {_holds(ok)}: {why}.")


def inplace_verdict(f: dict[str, Any], s: dict[str, Any]) -> str:
    r = f["chain.compiled_over_inplace"]
    ok = r >= COMPILED_OVER_INPLACE_MIN
    why = ("in-place saves allocations but keeps four passes" if ok else
           f"in-place takes less than {COMPILED_OVER_INPLACE_MIN:g}× the compiled time here")
    return (f"2. In-place: {_g(f['chain.inplace_ms'])} ms, a {f['chain.inplace_speedup']:.1f}× "
            f"speed-up over eager; it takes {r:.1f}× the compiled time (seed "
            f"{s['chain.compiled_over_inplace']:.1f}×) → {_holds(ok)}: {why}.")


def cache_verdict(f: dict[str, Any], s: dict[str, Any]) -> str:
    if f["compile.cold_s"] is None:
        return "2. First compile: not measured (cache probe skipped)."
    x = f["compile.cache_speedup"]
    ok = x >= CACHE_MIN_SPEEDUP
    return (f"2. First compile: {f['compile.cold_s']:.1f} s with an empty cache, "
            f"{f['compile.warm_s']:.1f} s warm (seed {s['compile.cold_s']:g} → "
            f"{s['compile.warm_s']:g} s) → {_holds(ok)}: the on-disk cache "
            f"{'cuts' if ok else 'changes'} the first call by {x:.1f}×.")


def overhead_verdict(f: dict[str, Any], s: dict[str, Any], sizes: FusionSizes) -> str:
    ratio = f["overhead.split_ratio"]
    ok = ratio >= SPLIT_MIN_RATIO
    why = "per-call overhead, not arithmetic, dominates small calls" if ok else (
        "the split costs little more than one call")
    return (f"3. Overhead: {sizes.add_calls:,} calls of {sizes.add_slice:,} elements take "
            f"{ratio:.1f}× one call (seed {s['overhead.split_ratio']:.1f}×), "
            f"{f['overhead.per_call_us']:.2f} µs per call (seed {s['overhead.per_call_us']:.2f}) "
            f"→ {_holds(ok)}: {why}.")


def traffic_verdict(f: dict[str, Any], s: dict[str, Any]) -> str:
    e, i, c = (f[f"traffic.{v}_gbps"] for v in ("eager", "inplace", "compiled"))
    ok = 1 / BANDWIDTH_TOLERANCE <= c / e <= BANDWIDTH_TOLERANCE
    why = ("time follows bytes moved, so 4× fewer bytes give the speed-up" if ok else
           "the variants reach different bandwidths, so bytes alone do not explain the times")
    fresh = f["traffic.fresh_array_ms"]
    mib = f["traffic.compiled_mb"] * 1e6 / 2 / 2**20  # one pass reads one array, writes one
    share = FRESH_ARRAYS["eager"] * fresh / f["chain.eager_ms"] * 100
    seed_ratio = s["traffic.compiled_gbps"] / s["traffic.eager_gbps"]
    net = ", ".join(_g(f[f"traffic.{v}_net_gbps"]) for v in PASSES)
    return (f"4. Traffic: eager {e:.1f}, in-place {i:.1f}, compiled {c:.1f} GB/s; compiled "
            f"moves 4× fewer bytes at {c / e:.2f}× eager's bandwidth (seed {seed_ratio:.2f}×) "
            f"→ {_holds(ok)}: {why}. A fresh {mib:.3g} MiB array costs {_g(fresh)} ms to "
            f"allocate and first touch; eager makes {FRESH_ARRAYS['eager']} per call "
            f"({share:.0f}% of its time); net of allocations: {net} GB/s.")


def verdicts(
    f: dict[str, Any], sizes: FusionSizes, seed: dict[str, Any] | None = None
) -> list[str]:
    """One sentence per experiment, computed from the figures ``f`` (see :func:`derive`) and
    the seed's (default :func:`seed_figures`)."""
    s = seed if seed is not None else seed_figures()
    return [
        fold_verdict(f, s), chain_verdict(f, s), inplace_verdict(f, s), cache_verdict(f, s),
        overhead_verdict(f, s, sizes), traffic_verdict(f, s),
    ]


# ---------------------------------------------------------------- running it all


def machine_info(device: torch.device, threads: int) -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(device),
        "threads": threads,
        "load_avg_1m": _load_average(),  # other work on the machine skews the times
        "env": {k: os.environ[k] for k in TIMING_ENV if k in os.environ},
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_fusion(
    sizes: FusionSizes = FusionSizes(),
    *,
    device: str | torch.device = "cpu",
    threads: int = 1,
    repeats: int = 7,
    compile_cache: bool = True,
    min_sample_s: float = MIN_SAMPLE_S,
) -> FusionReport:
    """All four experiments with ``torch.set_num_threads(threads)`` (restored afterwards).
    ``compile_cache=False`` skips the two fresh-process compiles (tens of seconds on a CPU)."""
    dev = torch.device(device)
    machine = machine_info(dev, threads)  # before torch.compile sets TORCHINDUCTOR_CACHE_DIR
    previous = torch.get_num_threads()
    tf32 = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.set_num_threads(threads)
    # True FP32 on GPUs: cuDNN's TF32 default would make folding differ by ~1e-2, not rounding.
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.inference_mode():
            fold = fold_experiment(sizes, dev, repeats, min_sample_s)
            chain_result = chain_experiment(sizes.chain_numel, dev, repeats, min_sample_s)
            overhead = overhead_experiment(
                sizes.add_calls, sizes.add_slice, dev, repeats, min_sample_s)
        cache_result = (compile_cache_experiment(sizes.chain_numel, dev, threads)
                        if compile_cache else None)
    finally:
        torch.set_num_threads(previous)
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    return FusionReport(machine, sizes, fold, chain_result, overhead, cache_result)

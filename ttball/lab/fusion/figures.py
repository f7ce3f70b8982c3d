"""The figures of the report, ours beside the seed's: flat dicts keyed ``experiment.name``.

:func:`derive` computes ratios, per-call overhead and bandwidths by one formula for both sides;
:data:`FIGURES` orders and labels them for the table.
"""

from __future__ import annotations

from typing import Any

from ttball.lab.fusion.experiments import (
    FRESH_ARRAYS,
    PASSES,
    SEED_SIZES,
    FusionSizes,
    bytes_moved,
    per_call_us,
)

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

# How the table names each variant of the chain.
VARIANT_NAMES = {"eager": "eager", "inplace": "in-place", "compiled": "compiled"}


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
    new["overhead.per_call_us"] = (
        None if one is None or split is None else per_call_us(one, split, sizes.add_calls))
    fresh = base.get("traffic.fresh_array_ms")
    for variant in PASSES:
        mb, ms = bytes_moved(variant, sizes.chain_numel, itemsize) / 1e6, base[f"chain.{variant}_ms"]
        new[f"traffic.{variant}_mb"] = mb
        new[f"traffic.{variant}_gbps"] = _q(mb, ms)
        net_ms = None if fresh is None or ms is None else ms - FRESH_ARRAYS[variant] * fresh
        new[f"traffic.{variant}_net_gbps"] = _q(mb, net_ms) if net_ms and net_ms > 0 else None
    return {**new, **base}


def seed_figures() -> dict[str, float | None]:
    return derive(SEED, SEED_SIZES)


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
    *((f"traffic.{v}_mb", "4 traffic", f"{name}: bytes moved", "MB")
      for v, name in VARIANT_NAMES.items()),
    *((f"traffic.{v}_gbps", "4 traffic", f"{name} bandwidth", "GB/s")
      for v, name in VARIANT_NAMES.items()),
    ("traffic.fresh_array_ms", "4 traffic", "allocate + first touch 1 array", "ms"),
    *((f"traffic.{v}_net_gbps", "4 traffic", f"{name}, net of {FRESH_ARRAYS[v]} allocation(s)",
       "GB/s") for v, name in VARIANT_NAMES.items()),
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
    """One row per variant of the chain: passes, allocations, bytes moved, time, bandwidth."""
    return [
        {"variant": v, "passes": PASSES[v], "fresh_arrays": FRESH_ARRAYS[v],
         "mb_moved": f[f"traffic.{v}_mb"], "ms": f[f"chain.{v}_ms"],
         "gb_per_s": f[f"traffic.{v}_gbps"], "net_gb_per_s": f[f"traffic.{v}_net_gbps"]}
        for v in PASSES
    ]

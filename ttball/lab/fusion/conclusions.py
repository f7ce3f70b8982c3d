"""One sentence per experiment saying whether the seed's conclusion holds on this machine.

Each threshold is tied to the seed's own figures; the sentences read the flat figures of
:func:`ttball.lab.fusion.figures.derive`, ours and the seed's.
"""

from __future__ import annotations

from typing import Any

from ttball.lab.fusion.experiments import FRESH_ARRAYS, PASSES, FusionSizes
from ttball.lab.fusion.figures import seed_figures

NOISE_PCT = 5.0  # the seed's two folding runs differed by 2.6%: ~2× that is noise
FUSION_MIN_SPEEDUP = 2.0  # half the 4× byte ratio (seed: 4.1×)
COMPILED_OVER_INPLACE_MIN = 1.5  # seed: in-place takes 3.1× the compiled time
CACHE_MIN_SPEEDUP = 2.0  # seed: a warm cache cuts the first compile 9×
SPLIT_MIN_RATIO = 2.0  # seed: 1,000 calls cost 6.8× one call
BANDWIDTH_TOLERANCE = 1.5  # seed: compiled and eager reach the same GB/s (ratio 1.01)
FOLD_REL_TOL = 1e-5  # ~100 float32 ulps of the output's largest value


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
    e, i, c = (f[f"traffic.{v}_gbps"] for v in PASSES)
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

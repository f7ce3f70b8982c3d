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

Modules: :mod:`.timing` (the timer), :mod:`.experiments` (1–3 and the byte counts of 4),
:mod:`.compile_cache` (first compile in fresh processes), :mod:`.figures` (ours beside the
seed's), :mod:`.conclusions` (does the seed's conclusion hold), :mod:`.machine`, :mod:`.report`
and :mod:`.runner` (:func:`run_fusion`). The names below are re-exported from them.
"""

from ttball.lab.fusion.compile_cache import (
    CompileCacheResult,
    compile_cache_experiment,
    first_compile_seconds,
    probe_main,
)
from ttball.lab.fusion.conclusions import (
    BANDWIDTH_TOLERANCE,
    CACHE_MIN_SPEEDUP,
    COMPILED_OVER_INPLACE_MIN,
    FOLD_REL_TOL,
    FUSION_MIN_SPEEDUP,
    NOISE_PCT,
    SPLIT_MIN_RATIO,
    cache_verdict,
    chain_verdict,
    fold_verdict,
    inplace_verdict,
    overhead_verdict,
    traffic_verdict,
    verdicts,
)
from ttball.lab.fusion.experiments import (
    FRESH_ARRAYS,
    PASSES,
    SEED_SIZES,
    ChainResult,
    FoldResult,
    FusionSizes,
    OverheadResult,
    bytes_moved,
    chain,
    chain_experiment,
    chain_inplace,
    chain_input,
    compiled_chain,
    fold_experiment,
    make_conv_bn,
    overhead_experiment,
)
from ttball.lab.fusion.figures import FIGURES, SEED, derive, figure_rows, seed_figures, traffic_rows
from ttball.lab.fusion.machine import TIMING_ENV, machine_info
from ttball.lab.fusion.report import FusionReport
from ttball.lab.fusion.runner import run_fusion
from ttball.lab.fusion.timing import MIN_SAMPLE_S, WARMUP_CALLS, Timing, measure

__all__ = [
    "BANDWIDTH_TOLERANCE", "CACHE_MIN_SPEEDUP", "COMPILED_OVER_INPLACE_MIN", "FIGURES",
    "FOLD_REL_TOL", "FRESH_ARRAYS", "FUSION_MIN_SPEEDUP", "MIN_SAMPLE_S", "NOISE_PCT", "PASSES",
    "SEED", "SEED_SIZES", "SPLIT_MIN_RATIO", "TIMING_ENV", "WARMUP_CALLS",
    "ChainResult", "CompileCacheResult", "FoldResult", "FusionReport", "FusionSizes",
    "OverheadResult", "Timing",
    "bytes_moved", "cache_verdict", "chain", "chain_experiment", "chain_inplace", "chain_input",
    "chain_verdict", "compile_cache_experiment", "compiled_chain", "derive", "figure_rows",
    "first_compile_seconds", "fold_experiment", "fold_verdict", "inplace_verdict",
    "machine_info", "make_conv_bn", "measure", "overhead_experiment", "overhead_verdict",
    "probe_main", "run_fusion", "seed_figures", "traffic_rows", "traffic_verdict", "verdicts",
]

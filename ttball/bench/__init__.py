"""``ttball bench``: every backend measured the same way (the seed's section-5 method).

- :mod:`~ttball.bench.runner`: variant selection, the per-variant measurement, flat rows
- :mod:`~ttball.bench.timing`: warm-up + groups of calls, CUDA events or perf_counter
- :mod:`~ttball.bench.profiling`: kernel/op time and count by category
- :mod:`~ttball.bench.roofline`: FLOPs and the per-layer memory floor, measured ceilings
- :mod:`~ttball.bench.memory`: peak memory of the calls
- :mod:`~ttball.bench.accuracy`: agreement with eager FP32, tolerances per precision
- :mod:`~ttball.bench.report`: terminal table, JSON, CSV, Markdown, PNG
"""

from ttball.bench.accuracy import TOLERANCES, agreement
from ttball.bench.runner import ROW_KEYS, BenchConfig, BenchResult, run_bench, select_variants
from ttball.bench.timing import FULL, QUICK, TimingPlan

__all__ = [
    "FULL",
    "QUICK",
    "ROW_KEYS",
    "TOLERANCES",
    "BenchConfig",
    "BenchResult",
    "TimingPlan",
    "agreement",
    "run_bench",
    "select_variants",
]

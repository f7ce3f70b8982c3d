"""All four experiments in one call, under the settings they need (threads, true FP32)."""

from __future__ import annotations

import torch

from ttball.lab.fusion.compile_cache import compile_cache_experiment
from ttball.lab.fusion.experiments import (
    SEED_SIZES,
    FusionSizes,
    chain_experiment,
    fold_experiment,
    overhead_experiment,
)
from ttball.lab.fusion.machine import machine_info
from ttball.lab.fusion.report import FusionReport
from ttball.lab.fusion.timing import MIN_SAMPLE_S


def run_fusion(
    sizes: FusionSizes = SEED_SIZES,
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

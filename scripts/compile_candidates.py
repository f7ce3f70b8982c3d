"""Compile the tuner's Triton candidates for an H200 (sm_90) on a machine without a GPU.

The same calls as a tuned first call of ``TritonExecutor`` (``triton_call`` of every candidate
of every step, one per distinct :meth:`TritonCall.key`), compiled through
``JITFunction.warmup`` as :func:`ttball.kernels.precompile.precompile` does, with a stand-in
Triton driver that reports an sm_90 device and launches nothing. Shows that every candidate
compiles, how many distinct kernels a shape needs, and how the pool scales with threads:

    python scripts/compile_candidates.py --threads 1 --limit 40
    python scripts/compile_candidates.py --threads 2 --limit 40

Run it in a process of its own (not under ``TRITON_INTERPRET=1``). The caches it writes go to
``TRITON_CACHE_DIR``: point that at an empty folder to time cold compiles.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported

import torch
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.driver import CudaDriver
from triton.runtime.driver import driver

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class StandInDriver(CudaDriver):
    """Triton's CUDA driver without libcuda: device 0 is an sm_90, there is no stream."""

    def __init__(self) -> None:  # not CudaDriver's, which loads libcuda
        self.launcher_cls = None

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        pass

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)

    def get_device_capability(self, device: int = 0) -> tuple[int, int]:
        return 9, 0

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="1: one after the other")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--height", type=int, default=288)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--limit", type=int, default=0, help="compile the first N only (0: all)")
    parser.add_argument("--variant", choices=("branches", "direct"), default="direct",
                        help="the candidates of triton-fp16-branches, or of -direct (with TMA, "
                        "and row walking; its CUDA kernels are not Triton's)")
    parser.add_argument("--kernel", default="", help="only the calls of this kernel function, "
                        "e.g. conv3x3_rows_kernel")
    args = parser.parse_args()

    driver.set_active(StandInDriver())
    from ttball.kernels import build_plan
    from ttball.kernels.buffers import Buffers
    from ttball.kernels.executor import TritonExecutor
    from ttball.kernels.plan import INPUT
    from ttball.kernels.precompile import precompile
    from ttball.model import BlurBall, randomize_batchnorm

    plan = build_plan(randomize_batchnorm(BlurBall(), seed=0).eval())
    cpu = torch.device("cpu")
    extra = args.variant == "direct"
    executor = TritonExecutor(plan, cpu, tma=extra, rows=extra, direct=extra)
    executor.tune = True  # the CUDA tuner's candidates, not the interpreter's one config
    bufs = Buffers(plan, args.batch, args.height, args.width, cpu)
    bufs.tensors[INPUT] = torch.empty(args.batch, 9, args.height, args.width).permute(0, 2, 3, 1)
    calls = executor.candidate_calls(bufs)
    if args.kernel:
        calls = [call for call in calls if call.kernel.__name__ == args.kernel]
    distinct = list({call.key(): call for call in calls}.values())
    chosen = distinct[: args.limit] if args.limit else distinct
    print(f"{args.variant}, batch {args.batch}: {len(calls)} candidate launches, "
          f"{len(distinct)} distinct kernels; compiling {len(chosen)} for sm_90 on "
          f"{args.threads} thread(s)", flush=True)
    start = time.perf_counter()
    if args.threads <= 1:
        failed = 0
        for call in chosen:
            try:
                call.warmup()
            except Exception as exc:  # noqa: BLE001
                failed += 1
                print(f"failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    else:
        report = precompile(chosen, cpu, args.threads)
        failed = report.failed
        for error in report.errors:
            print(f"failed{' in the pool' if report.retried else ''}: {error}", flush=True)
        if report.retried:
            print(f"{report.retried} tried again alone, {failed} of them failed again")
    seconds = time.perf_counter() - start
    print(f"{len(chosen) - failed} compiled, {failed} failed, {seconds:.1f} s "
          f"({seconds / max(1, len(chosen)):.2f} s a kernel)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""Compiling the tuner's Triton kernels on every core before it times them (issue 9, cold start).

A shape's first call tunes each step: it launches every candidate configuration once, then
times it, and Triton compiles a kernel at its first launch, so the compiles ran one after
the other (26-52 s for the first shape of ``triton-fp16-branches`` on an H200 machine with
Triton's cache empty, ``docs/benchmarks/triton-h200.md``). Triton's compiler releases the
GIL for most of its work: on the 2-core development machine two threads compiled 16 matmul
kernels for sm_90 in 3.3 s against 5.8 s in one. So :func:`precompile` first compiles every
candidate on a thread pool, with ``JITFunction.warmup`` (the specialization a launch with the
same arguments gets, and no launch), and the tuner's launches then find them compiled.

Nothing here decides a result: a kernel that fails to compile here is compiled again by its
launch, which reports the error to the tuner as before, and a call whose specialization this
module guesses wrong (:meth:`TritonCall.key`) only costs a compile at its launch.
``TTBALL_COMPILE_THREADS`` sets the pool's size (0 or 1: no precompiling).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

MAX_THREADS = 32


@dataclass(frozen=True)
class TritonCall:
    """One launch of a Triton kernel: ``kernel[grid](*args, **kwargs)``."""

    kernel: Any  # a triton.JITFunction
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def launch(self) -> None:
        self.kernel[self.grid](*self.args, **self.kwargs)

    def warmup(self) -> Any:
        """Compile (or find in Triton's caches) what :meth:`launch` runs, without running it;
        the compiled kernel (its ``asm`` holds the PTX)."""
        return self.kernel.warmup(*self.args, grid=self.grid, **self.kwargs)

    def key(self) -> tuple[Any, ...]:
        """What Triton specializes a compile on, as far as this module knows it: the kernel,
        each tensor's dtype and 16-byte alignment, each integer's width and whether it is 1
        or a multiple of 16, a TMA descriptor's block and dtype, and the keywords' values
        (constexprs and launch options, which must be hashable). Two calls with one key
        need one compile."""
        return (id(self.kernel), tuple(_spec(a) for a in self.args),
                tuple(sorted(self.kwargs.items())))  # constexprs count by value


def _spec(value: Any) -> Any:
    if isinstance(value, Tensor):
        return ("tensor", str(value.dtype), value.data_ptr() % 16 == 0)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return ("int", value == 1, value % 16 == 0, -(2**31) <= value < 2**31)
    if isinstance(value, float):
        return ("float",)
    block = getattr(value, "block_shape", None)
    if block is not None:  # a TMA tensor descriptor
        base = getattr(value, "base", None)
        return ("desc", tuple(block), str(getattr(base, "dtype", None)))
    return (type(value).__name__, repr(value))


def compile_threads() -> int:
    """The pool's size: ``$TTBALL_COMPILE_THREADS``, else one per core up to
    :data:`MAX_THREADS`."""
    env = os.environ.get("TTBALL_COMPILE_THREADS", "").strip()
    if env:
        if not env.isdigit():
            raise ValueError(f"TTBALL_COMPILE_THREADS must be a whole number, got {env!r}")
        return int(env)
    return min(MAX_THREADS, os.cpu_count() or 1)


@dataclass
class Precompiled:
    """What :func:`precompile` did: distinct kernels compiled, how many of them failed (left
    to their launches), other jobs run, wall seconds, threads, the first errors, and how
    many failed in the pool and were compiled again alone."""

    kernels: int = 0
    failed: int = 0
    jobs: int = 0
    seconds: float = 0.0
    threads: int = 0
    errors: list[str] = field(default_factory=list)  # why, for the first few failures
    retried: int = 0  # failed in the pool, then compiled again alone (failed counts the rest)


def precompile(calls: Sequence[TritonCall], device: torch.device, threads: int,
               jobs: Sequence[Callable[[], Any]] = ()) -> Precompiled:
    """Compile each distinct call of ``calls`` once, and run ``jobs`` (e.g. another kernel
    library's build), on ``threads`` threads with ``device`` current in each. The first call
    of each kernel compiles before the pool starts: Triton sets up a kernel's per-device
    caches at its first use, and two threads doing that at once could each keep their own.
    A call that fails in the pool is compiled once more alone after it. Errors are counted,
    not raised. With fewer than two threads nothing is done."""
    report = Precompiled(threads=threads)
    if threads < 2 or not (calls or jobs):
        return report
    start = time.perf_counter()
    unique: dict[tuple[Any, ...], TritonCall] = {}
    for call in calls:
        unique.setdefault(call.key(), call)
    first: dict[int, TritonCall] = {}
    rest: list[TritonCall] = []
    for call in unique.values():
        if id(call.kernel) in first:
            rest.append(call)
        else:
            first[id(call.kernel)] = call

    def run(job: Callable[[], Any]) -> bool:
        try:
            with torch.cuda.device(device) if device.type == "cuda" else nullcontext():
                job()
        except Exception as exc:  # noqa: BLE001  (a kernel's launch compiles it again, says why)
            if len(report.errors) < 5:
                report.errors.append(f"{type(exc).__name__}: {str(exc)[-500:]}")
            return False
        return True

    with ThreadPoolExecutor(threads, thread_name_prefix="ttball-compile") as pool:
        side = [pool.submit(run, job) for job in jobs]  # e.g. an nvcc build, meanwhile
        ok = [run(call.warmup) for call in first.values()]
        in_pool = list(pool.map(run, [call.warmup for call in rest]))
        # a compile that failed beside others is tried once more alone: one CI run saw one
        # fail in the pool that never failed alone
        again = [call for call, done in zip(rest, in_pool) if not done]
        report.retried = len(again)
        ok += [True] * in_pool.count(True) + [run(call.warmup) for call in again]
        for future in side:
            future.result()
    report.kernels, report.failed, report.jobs = len(ok), ok.count(False), len(side)
    report.seconds = time.perf_counter() - start
    return report


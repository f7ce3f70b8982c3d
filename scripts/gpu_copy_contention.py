"""Do a process's small GPU steps wait behind other processes' device copies?

In ``serve --ray`` (thirty-fifth session) a lane's statistics -- a tiny graph, an upload of a
few hundred bytes, a 28 MB copy of the logits and a copy of a few KB to the host -- took 5-9 ms
on its stream, and its network ~34 ms, while the SMs were busy about half the time. Those steps
include copies (``cudaMemcpyAsync``), which the driver may give to the copy engines, shared by
every process on the GPU (the replicas and their decode children, which copy ~20 GB/s of
frames between them). Here, as MPS clients when a daemon runs:

- **probe** (this process): each step's time on an otherwise empty stream, event to event,
  ``--reps`` times: ``d2h`` (4 KB to pinned memory), ``h2d`` (4 KB from pinned memory),
  ``memcpy`` (``Tensor.clone`` of ``--probe-mb`` MB), ``kernel_copy`` (the same as an
  element-wise kernel, :mod:`ttball.kernels.copies`), ``tiny`` (an add on 1,024 numbers);
- **background**: ``--procs`` processes copying ``--mb`` MB device to device back to back
  (``memcpy``: ``Tensor.copy_``; ``kernel``: the element-wise kernel), each reporting GB/s; or
  (``spin``) each running one-thread kernels that spin ~1 ms (``torch.cuda._sleep``) back to
  back: every SM but a few stays free, so a probe step that still waits ~1 ms beside them waits
  for the other processes' kernels to end, not for room on the SMs (the clients' kernels do not
  run side by side), and one that does not wait shares the GPU with them.

One row per background kind (``--backgrounds none,memcpy,kernel,spin``): each probe step's median,
p90 and max ms, and the background's GB/s. If ``d2h``/``h2d``/``memcpy`` wait milliseconds
behind ``memcpy`` copies but not behind ``kernel`` ones while ``tiny`` does not, the copy
engines are what a lane's steps queue for, and copies as kernels are the lever::

    PYTHONPATH=. python3 scripts/gpu_copy_contention.py --procs 8 --mb 143 --out copies.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from ttball.kernels import copies

PROBES = ("d2h", "h2d", "memcpy", "kernel_copy", "tiny")
BACKGROUNDS = ("none", "memcpy", "kernel", "spin")
SPIN_CYCLES = 2_000_000  # one spinning thread, ~1 ms at the H200's 1.98 GHz


def summary(ms: list[float]) -> dict[str, float]:
    """Median, p90 and max of ``ms`` (nearest rank), rounded to µs."""
    ordered = sorted(ms)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return {"median": round(statistics.median(ordered), 3), "p90": round(p90, 3),
            "max": round(ordered[-1], 3)}


def probe_steps(device: torch.device, mb: float) -> dict[str, Callable[[], Any]]:
    """Each probe step, ready to queue on the current stream."""
    n = int(mb * 2**20) // 4
    big, small = torch.randn(n, device=device), torch.zeros(1024, device=device)
    pinned = torch.empty(1024, pin_memory=device.type == "cuda")
    return {"d2h": lambda: pinned.copy_(small, non_blocking=True),
            "h2d": lambda: small.copy_(pinned, non_blocking=True),
            "memcpy": lambda: big.clone(),
            "kernel_copy": lambda: copies.clone(big, kernel=True),
            "tiny": lambda: small.add_(1)}


def probe(device: torch.device, mb: float, reps: int) -> dict[str, dict[str, float]]:
    """Each step's ms from an event before it to one after it, the stream otherwise empty;
    the steps interleaved, ``reps`` rounds."""
    steps = probe_steps(device, mb)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(reps):
        for name, step in steps.items():
            if device.type == "cuda":
                before = torch.cuda.Event(enable_timing=True)
                after = torch.cuda.Event(enable_timing=True)
                before.record()
                step()
                after.record()
                after.synchronize()
                times[name].append(before.elapsed_time(after))
            else:
                start = time.perf_counter()
                step()
                times[name].append(1e3 * (time.perf_counter() - start))
    return {name: summary(ms) for name, ms in times.items()}


def copier(device_name: str, kind: str, mb: float, ready: Any, stop: Any, results: Any) -> None:
    """Copy ``mb`` MB device to device (or spin, ``kind`` ``spin``) back to back until ``stop``;
    put ``(operations, GB copied, seconds)`` on ``results``."""
    device = torch.device(device_name)
    src = torch.randint(0, 255, (int(mb * 2**20),), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    kernel = kind == "kernel"

    def copy() -> None:
        if kind == "spin" and device.type == "cuda":
            torch.cuda._sleep(SPIN_CYCLES)
        else:  # (on the CPU, spin copies: a dry run)
            copies.copy_into(dst, src, kernel=kernel)
    copy()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    ready.wait()
    start, done = time.perf_counter(), 0
    while not stop.is_set():
        for _ in range(4):
            copy()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        done += 4
    results.put((done, done * src.numel() / 1e9, time.perf_counter() - start))


def run_row(device: torch.device, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """The probe beside ``args.procs`` copiers of ``kind`` (``none``: alone)."""
    ctx = mp.get_context("spawn")
    procs, results = [], ctx.Queue()
    ready, stop = ctx.Barrier(args.procs + 1) if kind != "none" else None, ctx.Event()
    if kind != "none":
        for _ in range(args.procs):
            proc = ctx.Process(target=copier, args=(str(device), kind, args.mb, ready, stop, results))
            proc.start()
            procs.append(proc)
        ready.wait()
        time.sleep(0.5)  # the copiers running
    try:
        row: dict[str, Any] = {"background": kind, "procs": args.procs if procs else 0,
                               "probe": probe(device, args.probe_mb, args.reps)}
    finally:
        stop.set()
        rates = [results.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(timeout=30)
    if rates and kind == "spin":
        row["background_spins_per_s"] = round(sum(n / sec for n, _, sec in rates), 1)
    elif rates:
        row["background_gb_per_s"] = round(sum(gb / sec for _, gb, sec in rates), 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--procs", type=int, default=8, help="background copier processes")
    parser.add_argument("--mb", type=float, default=143.0, help="MB a background copy")
    parser.add_argument("--probe-mb", type=float, default=28.0, help="MB of the probe's copies")
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--backgrounds", default="none,memcpy,kernel,spin")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_copy_contention.py: no CUDA device (use --device cpu for a dry run)")
    kinds = args.backgrounds.split(",")
    if bad := [k for k in kinds if k not in BACKGROUNDS]:
        sys.exit(f"gpu_copy_contention.py: unknown background {bad[0]!r} ({', '.join(BACKGROUNDS)})")
    rows = []
    for kind in kinds:
        rows.append(run_row(device, kind, args))
        print(json.dumps(rows[-1]), flush=True)
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                   "args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

"""How many GPU operations a second do N processes sharing one GPU get through?

The thirty-seventh session's reading of the worker (``docs/benchmarks/e2e.md``): eight
replicas send ~50,000 GPU operations a second whether they run the network (6,421 frames/s,
~358 operations a push) or not (9,909 frames/s, ~260), while the SMs are half idle -- as if the
GPU's clients together got through a fixed number of operations a second. Here, with nothing
else: each of N processes (MPS clients when the caller started a daemon) replays one CUDA graph
of ``--kernels`` one-element adds for ``--seconds``, all starting at once, either as fast as it
can enqueue (``sync`` 0) or waiting for each replay before the next (``sync`` 1, a lane's
pattern: launch, then wait). Per row: the kernels a second of all of them together, and each
process's.

    PYTHONPATH=. python scripts/gpu_ops_rate.py --out ops.json --procs 1,8,24 [--sync 0,1]

``--device cpu`` runs the same loops as eager adds on the CPU (a smoke test, no GPU figure).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

STAGGER_S = 0.5  # between process starts: MPS refused clients that came at once (LOG.md)


def worker(rank: int, device: str, kernels: int, seconds: float, sync: bool,
           barrier: Any, results: Any) -> None:
    """One process: warm up, wait for the others, replay for ``seconds``, report. A process
    that cannot warm up (an MPS client refused) reports why and still lets the others go."""
    try:
        import torch

        dev = torch.device(device)
        x = torch.zeros(1, device=dev)
        if dev.type == "cuda":
            x.add_(0)
            torch.cuda.synchronize(dev)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(kernels):
                    x.add_(0)
            run = graph.replay
            done = torch.cuda.synchronize
        else:
            def run() -> None:
                for _ in range(kernels):
                    x.add_(0)

            def done() -> None:
                pass
        run()
        done()
    except Exception as error:  # noqa: BLE001 -- reported; the others go on without it
        results.put({"rank": rank, "error": f"{type(error).__name__}: {str(error)[:200]}"})
        barrier.wait(timeout=300)
        return
    barrier.wait(timeout=300)
    try:
        start, graphs = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            run()
            graphs += 1
            if sync:
                done()
        done()
        elapsed = time.perf_counter() - start
        results.put({"rank": rank, "graphs": graphs, "kernels": graphs * kernels,
                     "seconds": elapsed})
    except Exception as error:  # noqa: BLE001 -- reported
        results.put({"rank": rank, "error": f"{type(error).__name__}: {str(error)[:200]}"})


def summarize(procs: int, sync: bool, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the processes' reports: every kernel over the slowest process's time
    (``kernels_per_s``), each process's own rate, and the errors."""
    ok = [r for r in reports if "error" not in r]
    row: dict[str, Any] = {"procs": procs, "sync": int(sync), "ok": len(ok),
                           "errors": sorted({r["error"] for r in reports if "error" in r})}
    if ok:
        row["kernels_per_s"] = sum(r["kernels"] for r in ok) / max(r["seconds"] for r in ok)
        rates = sorted(r["kernels"] / r["seconds"] for r in ok)
        row["per_process"] = {"min": rates[0], "median": rates[len(rates) // 2],
                              "max": rates[-1]}
    return row


def run_row(device: str, procs: int, kernels: int, seconds: float, sync: bool,
            stagger: float = STAGGER_S) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(procs), ctx.Queue()
    started = []
    for rank in range(procs):
        p = ctx.Process(target=worker, args=(rank, device, kernels, seconds, sync, barrier,
                                             results))
        p.start()
        started.append(p)
        time.sleep(stagger)
    reports = []
    for _ in started:
        try:
            reports.append(results.get(timeout=300 + procs * stagger + seconds))
        except Exception:  # noqa: BLE001 -- a process that never reported
            reports.append({"rank": -1, "error": "no report"})
    for p in started:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    return summarize(procs, sync, reports)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--procs", default="1,8,24", help="processes at once (comma list)")
    parser.add_argument("--sync", default="0,1",
                        help="0: enqueue freely; 1: wait for each replay (comma list)")
    parser.add_argument("--kernels", type=int, default=100, help="kernels a graph")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--stagger", type=float, default=STAGGER_S,
                        help="seconds between the processes' starts")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.kernels < 1 or args.seconds <= 0:
        parser.error("--kernels and --seconds must be positive")
    rows = []
    for procs in (int(p) for p in args.procs.split(",")):
        for sync in (s == "1" for s in args.sync.split(",")):
            row = run_row(args.device, procs, args.kernels, args.seconds, sync, args.stagger)
            rows.append(row)
            rate = f"{row['kernels_per_s']:,.0f}" if "kernels_per_s" in row else "-"
            print(f"{procs} processes, sync {int(sync)}: {rate} kernels/s together, "
                  f"{row['ok']} reported{'; ' + '; '.join(row['errors']) if row['errors'] else ''}",
                  flush=True)
            args.out.write_text(json.dumps({"device": args.device, "kernels": args.kernels,
                                            "seconds": args.seconds, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

"""Where a profiled lane's pushes went: the graphs it launched and its thread's time.

Reads the Chrome trace that ``TTBALL_PROFILE_PUSHES`` writes (``ttball.serve.push_profile``;
``trace.json.gz``) and prints

- per CUDA-graph launch (``cudaGraphLaunch`` with its kernels, matched by CUPTI's correlation
  id): when it was launched, the kernels' count, the ms from the launch to its first kernel,
  from its first kernel's start to its last kernel's end (``span``), and the kernels' own ms
  (``busy``); a span several times its busy time is a graph whose kernels waited for room;
- the thread's time, from its top-level torch operations and CUDA calls laid end to end (the
  profiler's own closing ``cudaDeviceSynchronize`` left out): in those calls, waiting before a
  decode answer's copy out (gaps that end at an ``aten::slice``, the first operation on an
  answer from a decode child), and the other gaps (Python between calls), those split by where
  they end: before an in-process nvJPEG decode call (a push's first call: the lane between
  pushes, idle or in the push's Python before it), before a read-back's
  ``cudaEventSynchronize`` (the previous push's completion), elsewhere in gaps of >= 0.1 ms
  (a few lines of Python take microseconds: gaps this long, spread over the push, point to the
  interpreter lock held by another thread) and in shorter ones;
- the thread's metadata-only operations (views, ``as_strided``, ``empty``...: ~1-10 us each)
  that lasted 50 us or more, their count and ms: such an operation doesn't wait for the GPU,
  and PyTorch takes the interpreter lock back after the operation's record has ended (the wait
  falls in the gap after it), so one that long was most likely descheduled by the OS (host CPU
  contention, or time stolen by the hypervisor): a sign to tell that from a wait for the lock;
- the GPU operations (kernels, copies, memsets) the process ran meanwhile, how many of them
  from graph launches, and their own time summed; with ``--pushes N`` (``summary.json``'s
  ``pushes``) a push's share of both (the thirty-seventh session's count; the thirty-eighth
  found the count is not the worker's bound, ``docs/benchmarks/e2e.md``);
- with ``--python`` (a trace taken with ``TTBALL_PROFILE_STACK=1``): that thread's time by
  Python function, self time (a call's own, less the calls it made), the largest first -- a
  wait shows as the built-in call that waits (a pipe's read, an event's synchronize), and a
  wait for the interpreter lock as the call whose return took it back.

    tar xzf docs/benchmarks/h200-2026-12-04b/call3/next.tgz -C /tmp next/prof/trace.json.gz
    python scripts/push_profile_report.py /tmp/next/prof/trace.json.gz [--json]
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from ttball.serve.push_profile import gpu_operations

HOST = ("cpu_op", "cuda_runtime", "cuda_driver", "user_annotation")
DECODE_CALL = "image::decode_jpegs_cuda"  # torchvision's nvJPEG, a push's first call in-process
READ_BACK_WAIT = "cudaEventSynchronize"
LONG_GAP_US = 100.0
METADATA_OPS = frozenset((
    "aten::as_strided", "aten::view", "aten::reshape", "aten::flatten", "aten::select",
    "aten::slice", "aten::unsqueeze", "aten::expand", "aten::alias", "aten::detach",
    "aten::detach_", "aten::empty", "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg"))
SLOW_METADATA_US = 50.0


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def _complete(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]


def graph_launches(trace: dict[str, Any]) -> list[dict[str, float]]:
    """Each ``cudaGraphLaunch`` that ran kernels, in launch order (ms from the first launch)."""
    events = _complete(trace)
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and e.get("name") == "cudaGraphLaunch" and "correlation" in e.get("args", {})}
    work: dict[int, list[dict[str, Any]]] = {}
    for e in gpu_operations(trace):
        if e.get("args", {}).get("correlation") in launches:
            work.setdefault(e["args"]["correlation"], []).append(e)
    rows = []
    for corr, launch in sorted(launches.items(), key=lambda kv: kv[1]["ts"]):
        ops = work.get(corr)
        if not ops:
            continue
        first = min(o["ts"] for o in ops)
        last = max(o["ts"] + o["dur"] for o in ops)
        rows.append({"launch_ms": launch["ts"] / 1e3, "kernels": len(ops),
                     "to_first_ms": (first - launch["ts"]) / 1e3, "span_ms": (last - first) / 1e3,
                     "busy_ms": sum(o["dur"] for o in ops) / 1e3})
    if rows:
        t0 = rows[0]["launch_ms"]
        for row in rows:
            row["launch_ms"] -= t0
    return rows


def operations(trace: dict[str, Any]) -> dict[str, float]:
    """The trace's GPU operations (kernels, copies, memsets), those of graph launches, and
    their own time summed (ms; operations of other processes running beside them stretch it)."""
    events = _complete(trace)
    graphs = {e["args"]["correlation"] for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and e.get("name") == "cudaGraphLaunch" and "correlation" in e.get("args", {})}
    ops = gpu_operations(trace)
    in_graphs = sum(e.get("args", {}).get("correlation") in graphs for e in ops)
    return {"total": len(ops), "in_graphs": in_graphs,
            "busy_ms": sum(e["dur"] for e in ops) / 1e3}


def _busiest(events: list[dict[str, Any]]) -> Any:
    """The thread with the most of ``events`` (None without any)."""
    counts = Counter(e.get("tid") for e in events)
    return counts.most_common(1)[0][0] if counts else None


def thread_split(trace: dict[str, Any]) -> dict[str, float]:
    """The busiest host thread's ms: in calls, waiting before a decode answer's copy out, and
    in the other gaps between calls (see the module docstring)."""
    events = [e for e in _complete(trace) if e.get("cat") in HOST
              and e.get("name") != "cudaDeviceSynchronize"]
    split = dict.fromkeys(("span_ms", "calls_ms", "decode_wait_ms", "other_gaps_ms",
                           "before_decode_ms", "before_read_back_ms", "long_gaps_ms",
                           "short_gaps_ms"), 0.0)
    split["long_gaps"] = 0
    if not events:
        return split
    tid = _busiest(events)
    top, end = [], float("-inf")
    for e in sorted((e for e in events if e.get("tid") == tid), key=lambda e: e["ts"]):
        if e["ts"] >= end:
            top.append(e)
            end = e["ts"] + e["dur"]
    split["calls_ms"] = sum(e["dur"] for e in top) / 1e3
    for before, after in itertools.pairwise(top):
        gap = (after["ts"] - before["ts"] - before["dur"]) / 1e3
        if after["name"] == "aten::slice" and gap > 1.0:  # > 1 ms: a wait, not a step
            split["decode_wait_ms"] += gap
            continue
        split["other_gaps_ms"] += gap
        if after["name"] == DECODE_CALL:
            split["before_decode_ms"] += gap
        elif after["name"] == READ_BACK_WAIT:
            split["before_read_back_ms"] += gap
        elif gap >= LONG_GAP_US / 1e3:
            split["long_gaps_ms"] += gap
            split["long_gaps"] += 1
        else:
            split["short_gaps_ms"] += gap
    split["span_ms"] = (top[-1]["ts"] + top[-1]["dur"] - top[0]["ts"]) / 1e3
    return split


def slow_metadata_ops(trace: dict[str, Any]) -> dict[str, float]:
    """The busiest host thread's metadata-only operations of >= ``SLOW_METADATA_US``: how many
    and their ms (see the module docstring), and how many such operations it ran in all."""
    events = [e for e in _complete(trace) if e.get("cat") in HOST]
    tid = _busiest(events)
    mine = [e for e in events if e.get("tid") == tid and e.get("name") in METADATA_OPS]
    slow = [e["dur"] for e in mine if e["dur"] >= SLOW_METADATA_US]
    return {"ops": len(mine), "slow": len(slow), "slow_ms": sum(slow) / 1e3}


def python_self_time(trace: dict[str, Any], top: int = 20) -> dict[str, Any]:
    """The busiest ``python_function`` thread's self time by function name: ``span_ms`` (its
    first call's start to its last call's end), ``functions`` (``[name, ms, calls]``, the
    ``top`` largest)."""
    events = [e for e in _complete(trace) if e.get("cat") == "python_function"]
    if not events:
        return {"span_ms": 0.0, "functions": []}
    tid = _busiest(events)
    mine = sorted((e for e in events if e.get("tid") == tid), key=lambda e: (e["ts"], -e["dur"]))
    own: dict[str, list[float]] = {}
    stack: list[list[Any]] = []  # [event, its children's time]
    for e in mine:
        while stack and e["ts"] >= stack[-1][0]["ts"] + stack[-1][0]["dur"]:
            _close(stack.pop(), stack, own)
        stack.append([e, 0.0])
    while stack:
        _close(stack.pop(), stack, own)
    span = max(e["ts"] + e["dur"] for e in mine) - mine[0]["ts"]
    ranked = sorted(own.items(), key=lambda kv: -kv[1][0])[:top]
    return {"span_ms": span / 1e3,
            "functions": [[name, ms / 1e3, int(n)] for name, (ms, n) in ranked]}


def _close(entry: list[Any], stack: list[list[Any]], own: dict[str, list[float]]) -> None:
    event, children = entry
    row = own.setdefault(event["name"], [0.0, 0])
    row[0] += max(0.0, event["dur"] - children)
    row[1] += 1
    if stack:
        stack[-1][1] += event["dur"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    parser.add_argument("--pushes", type=int, default=0,
                        help="the profiled pushes (summary.json): operations a push too")
    parser.add_argument("--python", action="store_true",
                        help="the thread's Python self time by function (TTBALL_PROFILE_STACK=1)")
    args = parser.parse_args()
    try:
        trace = load(args.trace)
    except (OSError, ValueError, EOFError) as exc:  # EOFError: a gzip cut off while written
        sys.exit(f"push_profile_report.py: cannot read {args.trace}: {exc}")
    graphs, split, ops = graph_launches(trace), thread_split(trace), operations(trace)
    slow = slow_metadata_ops(trace)
    python = python_self_time(trace) if args.python else None
    if args.json:
        print(json.dumps({"graphs": graphs, "thread": split, "operations": ops,
                          "slow_metadata_ops": slow,
                          **({"python": python} if python is not None else {})}, indent=1))
        return
    print("graph launches: at ms, kernels, launch -> first kernel ms, span ms, busy ms")
    for g in graphs:
        print(f"  {g['launch_ms']:8.1f} {g['kernels']:5d} {g['to_first_ms']:8.2f} "
              f"{g['span_ms']:8.2f} {g['busy_ms']:8.2f}")
    share = f", {ops['total'] / args.pushes:.0f} a push" if args.pushes > 0 else ""
    time_share = f", {ops['busy_ms'] / args.pushes:.2f} a push" if args.pushes > 0 else ""
    print(f"GPU operations: {ops['total']} (kernels, copies, memsets), {ops['in_graphs']} of "
          f"them from graph launches{share}; their own time {ops['busy_ms']:.2f} ms{time_share}")
    span = split["span_ms"] or 1.0
    print(f"thread: {split['span_ms']:.1f} ms; in calls {split['calls_ms']:.1f} "
          f"({100 * split['calls_ms'] / span:.0f} %), waiting before a decode answer "
          f"{split['decode_wait_ms']:.1f} ({100 * split['decode_wait_ms'] / span:.0f} %), "
          f"other gaps {split['other_gaps_ms']:.1f} ({100 * split['other_gaps_ms'] / span:.0f} %)")
    long_mean = split["long_gaps_ms"] / max(split["long_gaps"], 1)
    print(f"other gaps, ms: before a decode call {split['before_decode_ms']:.1f}, before a "
          f"read-back's wait {split['before_read_back_ms']:.1f}, elsewhere {split['long_gaps']:.0f} "
          f"gaps of >= {LONG_GAP_US / 1e3:.1f} ms {split['long_gaps_ms']:.1f} (mean {long_mean:.2f}), "
          f"shorter ones {split['short_gaps_ms']:.1f}")
    print(f"metadata-only operations of >= {SLOW_METADATA_US:.0f} us (the thread most likely "
          f"descheduled): {slow['slow']} of {slow['ops']}, {slow['slow_ms']:.1f} ms")
    if python is not None:
        if not python["functions"]:
            print("python: no python_function events (profile with TTBALL_PROFILE_STACK=1)")
            return
        print(f"python: {python['span_ms']:.1f} ms; self time by function, ms (% of it), calls")
        for name, ms, calls in python["functions"]:
            print(f"  {ms:9.1f} ({100 * ms / (python['span_ms'] or 1.0):4.1f} %) {calls:6d}  {name}")


if __name__ == "__main__":
    main()

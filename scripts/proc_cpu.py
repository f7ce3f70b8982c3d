"""CPU time of chosen processes and each of their threads, between two snapshots of ``/proc``
(Linux): to see whether a process or one of its threads is pegged while a load test runs --
a thread near 100 % of a core, or a process's Python threads together near one core, means
it waits on itself (or on its interpreter lock), not on the GPU::

    python scripts/proc_cpu.py snap 'ServeReplica' > before.json     # processes whose command
    ...                                                                # line matches the regex
    python scripts/proc_cpu.py snap 'ServeReplica' > after.json
    python scripts/proc_cpu.py diff before.json after.json [--json]

``diff`` prints, per process in both snapshots, its CPU % of one core over the interval and its
busiest threads (``comm`` names, as the kernel keeps them: Python's own thread names are not
there). ``scripts/gpu_ray_loadtest.sh`` takes a snapshot of the replicas before and after each
load test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

PROC = Path("/proc")


def _ticks(stat: str) -> tuple[str, int]:
    """``(comm, utime + stime)`` of one ``/proc/.../stat`` line; the name may hold spaces and
    parentheses, so the fields are counted from the last ``)``."""
    head, _, rest = stat.rpartition(")")
    fields = rest.split()  # fields[0] is the state (field 3): utime is field 14, stime 15
    return head.partition("(")[2], int(fields[11]) + int(fields[12])


def snapshot(pattern: str | None = None, proc: Path = PROC,
             pids: list[int] | None = None) -> dict[str, Any]:
    """Every process whose command line matches ``pattern`` (never the caller), or the
    processes ``pids`` (the caller too): its command and, per thread, ``[comm, ticks]``.
    Processes or threads that end while being read are skipped."""
    match = re.compile(pattern or "")
    procs: dict[str, Any] = {}
    me = str(os.getpid())
    entries = [proc / str(p) for p in pids] if pids is not None else proc.iterdir()
    for entry in entries:
        if not entry.name.isdigit() or (pids is None and entry.name == me):
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if pids is None and not match.search(cmd):
                continue
            threads = {}
            for task in (entry / "task").iterdir():
                try:
                    threads[task.name] = list(_ticks((task / "stat").read_text()))
                except (OSError, IndexError, ValueError):
                    continue
        except OSError:
            continue
        procs[entry.name] = {"cmd": cmd[:120], "threads": threads}
    return {"time": time.clock_gettime(time.CLOCK_MONOTONIC), "clk_tck": os.sysconf("SC_CLK_TCK"),
            "procs": procs}


def diff(before: dict[str, Any], after: dict[str, Any], top: int = 4) -> list[dict[str, Any]]:
    """Per process in both snapshots: ``name`` (its main thread's ``comm``: a process that
    names itself, as a decode child's ``tt-decoder``, is told apart there), ``cpu_pct`` (% of
    one core over the interval), its thread count and its ``top`` busiest threads ``[comm,
    tid, %]``, busiest process first."""
    seconds = after["time"] - before["time"]
    if seconds <= 0:
        raise ValueError("the second snapshot is not later than the first")
    scale = 100.0 / (after["clk_tck"] * seconds)
    rows = []
    for pid, now in after["procs"].items():
        then = before["procs"].get(pid)
        if then is None:
            continue
        threads = []
        for tid, (comm, ticks) in now["threads"].items():
            start = then["threads"].get(tid, [comm, 0])[1]  # a thread born since: from zero
            threads.append([comm, int(tid), round((ticks - start) * scale, 1)])
        threads.sort(key=lambda t: -t[2])
        rows.append({"pid": int(pid), "name": now["threads"].get(pid, [""])[0],
                     "cmd": now["cmd"], "seconds": round(seconds, 2),
                     "cpu_pct": round(sum(t[2] for t in threads), 1),
                     "threads": len(threads), "top": threads[:top]})
    rows.sort(key=lambda r: -r["cpu_pct"])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snap", help="print a snapshot (JSON) of the matching processes")
    snap.add_argument("pattern", help="regular expression searched in each command line")
    dif = sub.add_parser("diff", help="CPU %% per process and thread between two snapshots")
    dif.add_argument("before", type=Path)
    dif.add_argument("after", type=Path)
    dif.add_argument("--json", action="store_true", help="the rows as JSON")
    args = parser.parse_args(argv)
    if args.command == "snap":
        json.dump(snapshot(args.pattern), sys.stdout)
        return 0
    try:
        rows = diff(*(json.loads(p.read_text()) for p in (args.before, args.after)))
    except (OSError, ValueError, KeyError) as exc:
        print(f"proc_cpu: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(rows, sys.stdout)
        return 0
    for r in rows:
        busiest = ", ".join(f"{comm}[{tid}] {pct}" for comm, tid, pct in r["top"])
        print(f"{r['pid']:>8} {r['cpu_pct']:7.1f} % of a core over {r['seconds']} s, "
              f"{r['threads']} threads; busiest: {busiest}  ({r['cmd'][:60]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

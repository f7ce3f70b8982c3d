"""``scripts/gpu_ray_loadtest.sh``'s summary: from its output folder (``ready-R.json``,
``loadtest-R-S.json`` and, per load test, ``cpu-R-S.txt``, ``gpu-R-S.csv``,
``gpu-R-S-gpm.txt``, ``procs-R-S.json``, ``gil-R-S.txt``) write ``summary.json`` and
``SUMMARY.md`` and print the latter::

    python scripts/ray_loadtest_summary.py OUT/ray BACKEND BATCHES DURATION_S

The run's mode (MPS, the cap, blocking sync, ...) is read from the same environment variables
the load-test script takes. A file that is missing or unreadable leaves its cell empty.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttball.hostcpu import cpu_shares, cpu_ticks


def host_cpu(path: str) -> dict[str, float | None]:
    """The host CPU's ``busy_pct`` and ``steal_pct`` between the two ``/proc/stat`` "cpu" lines
    in ``path``, and ``steal_boot_pct`` from the host's boot to the first
    (:func:`ttball.hostcpu.cpu_shares`; stolen: a virtual machine's CPUs given to its
    neighbours, which lengthens the latency tail -- the fifty-second session's runs: 0.1-1.7 %
    on quiet hosts, ~8 % where p99 doubled; the fifty-third's: 0.9 % since boot on a host whose
    tail was long in runs that lost nothing themselves); None each where the file can't
    tell."""
    try:
        lines = Path(path).read_text().splitlines()[:2]
    except OSError:
        lines = []
    shares = cpu_shares(cpu_ticks(lines[0]), cpu_ticks(lines[1])) if len(lines) == 2 else None
    return shares or {"busy_pct": None, "steal_pct": None, "steal_boot_pct": None}


def gpu_busy(path: str) -> float | None:
    """Mean of nvidia-smi's ``utilization.gpu`` samples (``timestamp, util, clock, power``)."""
    try:
        busy = [float(line.split(",")[1]) for line in Path(path).read_text().splitlines() if line.count(",") >= 3]
    except (OSError, ValueError):
        return None
    return round(sum(busy) / len(busy), 1) if busy else None


def replica_cpu(path: str) -> list[list[float]]:
    """Per worker replica in a ``proc_cpu.py diff --json`` file: [its CPU % of a core, its
    busiest thread's %]."""
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return []
    return [[r["cpu_pct"], r["top"][0][2] if r["top"] else 0.0] for r in rows
            if "TTBallWorker" in r["cmd"]]


def decoder_cpu(path: str) -> list[float] | None:
    """The decode children (``serve --decode-processes``, named ``tt-decoder``) in a
    ``proc_cpu.py diff --json`` file: [how many, their CPU % of a core summed, the busiest's];
    ``None`` without any."""
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    pcts = [r["cpu_pct"] for r in rows if r.get("name") == "tt-decoder"]
    return [len(pcts), round(sum(pcts), 1), max(pcts)] if pcts else None


def gil_share(path: str, seconds: float, rate: float = 200,
              names: dict[str, str] | None = None) -> dict[str, Any] | None:
    """``py-spy record --gil --threads -f raw`` stacks of one replica over ``seconds`` at
    ``rate`` Hz: the % of the time some thread held the interpreter lock, and per thread
    (``names``: thread id → kernel thread name, from ``procs-R-S.json``); ``failed_pct``: the
    % of sample times py-spy failed to read (its log beside ``path``, ``.log`` for ``.txt``:
    "Samples: N Errors: M"; --nonblocking reads a running process, so some fail -- 76 of 1,600
    in the fifty-third session), which may have held it: the share lies between ``held_pct``
    and ``held_max_pct`` (both None without the log)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    by_tid: dict[str, int] = {}
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        head = stack.split(";", 1)[0]  # "thread (TID): name" with --threads
        tid = head[head.find("(") + 1:head.find(")")] if head.startswith("thread (") else "?"
        by_tid[tid] = by_tid.get(tid, 0) + int(count)
    if not by_tid:
        return None
    total = rate * seconds
    names = names or {}
    held = sum(by_tid.values())
    failed = _failed(Path(path).with_suffix(".log"))
    return {"held_pct": round(100 * held / total, 1),
            "failed_pct": None if failed is None else round(100 * failed / total, 1),
            "held_max_pct": None if failed is None else round(100 * (held + failed) / total, 1),
            "by_thread_pct": {names.get(t, t): round(100 * c / total, 1)
                              for t, c in sorted(by_tid.items(), key=lambda x: -x[1])}}


def _failed(log: Path) -> int | None:
    """The samples py-spy's ``log`` counts as errors (None: no count)."""
    try:
        found = re.search(r"Errors: (\d+)", log.read_text())
    except OSError:
        return None
    return int(found.group(1)) if found else None


def thread_names(path: str) -> dict[str, str]:
    """Thread id → kernel name, from a ``proc_cpu.py diff --json`` file's busiest threads."""
    try:
        return {str(tid): comm for row in json.loads(Path(path).read_text()) for comm, tid, _ in row["top"]}
    except (OSError, ValueError, KeyError):
        return {}


def gpm_means(path: str) -> dict[str, float]:
    """{column: mean} of ``nvidia-smi dmon --gpm-metrics`` (header ``# gpu ...``, units
    ``# Idx ...``); percentages over 100, a garbage sample, are dropped."""
    try:
        text = Path(path).read_text().splitlines()
    except OSError:
        return {}
    heads = [line[1:].split() for line in text if line.startswith("#")]
    names = next((h for h in heads if "gpu" in h), None)
    units = next((h for h in heads if "Idx" in h), [])  # "%" or "GPM:%" for percentages
    rows = [line.split() for line in text if line.strip() and not line.startswith("#")]
    if not names:
        return {}
    means = {}
    for i, name in enumerate(names[1:], 1):
        pct = i < len(units) and units[i].endswith("%")
        vals = [float(r[i]) for r in rows if len(r) == len(names) and r[i].replace(".", "", 1).isdigit()]
        vals = [v for v in vals if not pct or v <= 100]
        if vals:
            means[name] = round(sum(vals) / len(vals), 1)
    return means


def mode(env: dict[str, str]) -> str:
    """The run's set-up, in words, from the load-test script's knobs."""
    text = "device pipeline" if env.get("DEVICE_PIPELINE") else "host path"
    text += ", direct streams" if env.get("DIRECT_STREAMS") else ", streams through the ingress"
    text += ", CUDA MPS" if env.get("MPS") else ""
    text += f" ({env['MPS_PCT']} % of the SMs a replica)" if env.get("MPS") and env.get("MPS_PCT") else ""
    text += f" (--mps-sm-percent {env['SM_PERCENT']})" if env.get("SM_PERCENT") else ""
    text += ", blocking sync" if env.get("BLOCKING_SYNC") else ""
    text += f", switch interval {env['SWITCH_MS']} ms" if env.get("SWITCH_MS") else ""
    text += f", --batches-ahead {env['BATCHES_AHEAD']}" if env.get("BATCHES_AHEAD") else ""
    text += f", --pipeline-depth {env['PIPELINE_DEPTH']}" if env.get("PIPELINE_DEPTH") else ""
    text += ", --stats-stream" if env.get("STATS_STREAM") else ""
    text += f", --max-delay-ms {env['MAX_DELAY_MS']}" if env.get("MAX_DELAY_MS") else ""
    text += ", --flush-thread" if env.get("FLUSH_THREAD") else ""
    text += ", --flush-after-push" if env.get("FLUSH_AFTER") else ""
    text += ", --live-settings" if env.get("LIVE") else ""
    text += ", --decode-early" if env.get("DECODE_EARLY") else ""
    text += ", --decode-on-arrival" if env.get("ARRIVAL") else ""
    text += ", --no-carry-windows" if env.get("CARRY") == "0" else ""
    text += ", RAY_USE_UVLOOP=0" if env.get("RAY_USE_UVLOOP") == "0" else ""
    return text


def _gil_cell(gil: dict[str, Any] | None) -> str:
    if not gil:
        return ""
    top = ", ".join(f"{t} {p}" for t, p in list(gil["by_thread_pct"].items())[:4])
    failed = gil.get("failed_pct")
    bound = f"; up to {gil['held_max_pct']} with {failed} % failed samples" if failed else ""
    return f"{gil['held_pct']} ({top}{bound})"


def replica_settings(path: str | Path) -> dict[str, Any] | None:
    """``live-R-S.json`` (PUT /v1/admin/settings's reply before that load): each replica's
    settings by its id; None without the file (or one that is not such a reply)."""
    try:
        replicas = json.loads(Path(path).read_text())["replicas"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return replicas if isinstance(replicas, dict) else None


def agreed(replicas: dict[str, Any]) -> Any | None:
    """The settings every replica in ``replicas`` (:func:`replica_settings`) ran under; None
    when they differ or there are none."""
    values = list(replicas.values())
    return values[0] if values and all(v == values[0] for v in values) else None


def live_settings(path: str) -> dict[str, Any] | None:
    """The settings the replicas ran a load under (:func:`replica_settings`), when they all
    agree, else every replica's, by id; None without the file."""
    replicas = replica_settings(path)
    if replicas is None:
        return None
    common = agreed(replicas)
    return common if common is not None else replicas


def _ready(path: Path) -> dict[str, Any]:
    """A ``ready-N.json``; empty or cut short when the server stopped before it was ready
    (its start-up took longer than the budget): ``{}``, shown as not ready."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}


def summarize(folder: str, backend: str, batches: str, duration: float,
              env: dict[str, str]) -> list[str]:
    """Write ``summary.json`` and ``SUMMARY.md`` in ``folder``; returns SUMMARY.md's lines."""
    ready = {int(os.path.basename(p)[6:-5]): _ready(Path(p))
             for p in sorted(glob.glob(f"{folder}/ready-*.json"))}
    runs = [{"replicas": int(os.path.basename(p).split("-")[1]), **json.loads(Path(p).read_text())}
            for p in glob.glob(f"{folder}/loadtest-*-*.json")]
    runs.sort(key=lambda r: (r["replicas"], r["sessions"]))
    for r in runs:
        at = f"{folder}/%s-{r['replicas']}-{r['sessions']}%s"
        host = host_cpu(at % ("cpu", ".txt"))
        r["host_cpu_busy_pct"], r["host_cpu_steal_pct"] = host["busy_pct"], host["steal_pct"]
        r["host_cpu_steal_boot_pct"] = host["steal_boot_pct"]
        r["gpu_busy_pct"] = gpu_busy(at % ("gpu", ".csv"))
        r["gpm"] = gpm_means(at % ("gpu", "-gpm.txt"))
        r["replica_cpu"] = replica_cpu(at % ("procs", ".json"))
        r["decoder_cpu"] = decoder_cpu(at % ("procs", ".json"))
        r["gil"] = gil_share(at % ("gil", ".txt"), duration,
                             names=thread_names(at % ("procs", ".json")))
        r["live"] = live_settings(at % ("live", ".json"))
    keys = ("sessions", "achieved_fps", "offered_fps", "latency_ms", "late", "dropped",
            "behind_schedule", "errors", "host_cpu_busy_pct", "host_cpu_steal_pct",
            "host_cpu_steal_boot_pct", "gpu_busy_pct", "gpm",
            "replica_cpu", "decoder_cpu", "gil", "live")
    how = mode(env)
    summary = {"backend": backend, "warmup_batches": batches, "mode": how,
               "time_to_ready_s": {n: r.get("time_to_ready_s") for n, r in ready.items()},
               "runs": [{"replicas": r["replicas"], **{k: r.get(k) for k in keys}} for r in runs]}
    Path(f"{folder}/summary.json").write_text(json.dumps(summary, indent=2))
    lines = [f"# ttball serve --ray: {backend}, warm-up batches {batches}, {how}", "",
             "| replicas | time to ready s | replicas' event loops |", "|---|---|---|"]
    lines += [f"| {n} | {r.get('time_to_ready_s')} | "
              f"{', '.join(sorted({str(x.get('event_loop')) for x in r.get('replicas') or []}))} |"
              for n, r in sorted(ready.items())]
    head = ("| replicas | sessions | offered fps | rows/s | p50 ms | p95 ms | p99 ms | late (>50 ms) "
            "| dropped | errors | host CPU busy % (stolen; since boot) | GPU busy % | GPM means | replicas' CPU % (busiest "
            "thread) | decode children: count, CPU % summed (busiest) "
            "| one replica's interpreter lock held % (by thread) |")
    lines += ["", head, "|---" * head.count(" | ") + "|---|"]
    for r in runs:
        lat = r["latency_ms"]
        gpm = " ".join(f"{k} {v}" for k, v in r["gpm"].items())
        cpu = ", ".join(f"{a:.0f} ({b:.0f})" for a, b in r["replica_cpu"])
        kids = r["decoder_cpu"]
        kids_cell = f"{kids[0]}, {kids[1]:.0f} ({kids[2]:.0f})" if kids else ""
        lines.append(f"| {r['replicas']} | {r['sessions']} | {r['offered_fps']} | {r['achieved_fps']} "
                     f"| {lat['p50']} | {lat['p95']} | {lat['p99']} | {r['late']} | {r['dropped']} "
                     f"| {r['errors']} | {r['host_cpu_busy_pct']} ({r['host_cpu_steal_pct']}; "
                     f"{r['host_cpu_steal_boot_pct']}) | {r['gpu_busy_pct']} | {gpm} | {cpu} "
                     f"| {kids_cell} | {_gil_cell(r['gil'])} |")
    if any(r["live"] for r in runs):  # LIVE_<s>: the settings each load ran under
        lines += ["", "| replicas | sessions | live settings (every replica) |", "|---|---|---|"]
        lines += [f"| {r['replicas']} | {r['sessions']} | "
                  f"{json.dumps(r['live'], sort_keys=True) if r['live'] else ''} |" for r in runs]
    Path(f"{folder}/SUMMARY.md").write_text("\n".join(lines) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print("usage: ray_loadtest_summary.py FOLDER BACKEND BATCHES DURATION_S", file=sys.stderr)
        return 2
    print("\n".join(summarize(args[0], args[1], args[2], float(args[3]), dict(os.environ))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""End to end with several processes sharing one GPU (issue 9's last target): P worker
processes, each a :class:`ttball.kernels.prepost.GpuPipeline` with its own share of the
sessions, all pushing JPEG frames at once; the GPU's frames/s is the sum of theirs.

One process is bound by its host side at about a third of the network's rate
(``docs/benchmarks/e2e.md``); this measures how far processes take one GPU. The parent builds
and warms the backend once (so the tuner's choices and compiled kernels are in the cache
directory) and encodes the frames; each child builds its own backend from that cache, warms
its pipeline, waits at a barrier with the others, then pushes for ``--seconds`` and reports
its frames, push latencies and rows. Per ``(processes, batch)`` row: the summed frames/s, each
process's, push p50/p99 over all pushes, the p99 latency of a frame at 60-fps arrival (the
time its push takes to fill from this process's sessions, plus the push's p99), and, sampled
by the parent while the children push, the host's CPU busy share (``/proc/stat``, all cores)
and the GPU's utilization (``nvidia-smi``: the share of time a kernel ran), power draw and SM
clock, which say whether the host or the GPU stops the processes (and, by the power, how
much of the GPU's busy time is work).

    PYTHONPATH=. python3 scripts/gpu_e2e_procs.py --out procs.json --backend triton-fp16-direct \
        --rows 1x32,2x32,4x16,4x32 --compile-resize

Run it again after ``nvidia-cuda-mps-control -d`` (``--tag mps``) for the same with CUDA MPS,
whose processes' kernels share the GPU at once instead of by time slices.

``--network-only``: the same processes, lanes, threads and streams, but each lane only runs its
backend on one fixed batch of ``BATCH`` windows, back to back, waiting for each call (no JPEG,
no resize, no post-processing): what the network alone gives when the GPU is shared the way
the worker shares it (``4x16x2``: four processes of two lanes at 16 windows, as ``serve --ray``'s
four replicas), against one lane at 64 (``1x64``). Its rows' ``frames_per_s`` count
``--step`` frames a window, so they compare with the end-to-end rows; ``windows_per_s`` is
beside them, ``rows_out`` is 0.

Each pipeline's sessions start with their window phases staggered, as in ``gpu_e2e.py``
(``--aligned-phases`` for the bursts of the rows measured before the twentieth session).

A row ``PxBxL`` gives each process L lanes: L pipelines, each with its own backend and CUDA
stream, pushed from one thread each, so that their kernels share one CUDA context (no time
slices between them) while the pipelines' host work overlaps wherever it leaves the GIL
(nvJPEG, the graphs' replays, the waits). ``1x16x4`` is one process holding the GPU for all
the sessions. Once a process's lanes are warm, their CUDA graphs are frozen: a capture fails
while another thread of the process works (twenty-first session), so what has no graph by
then runs eagerly; ``uncaptured_calls`` counts those calls. A process builds and warms its
lanes one after another (``start_s_max``: the slowest process's start); twelve lanes a GPU
took more than 120 s on the H200, so give such rows ``--start-timeout-s 200``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_e2e import WARM_SIZES, environment, feed, load_weights, make_frames, open_pipeline

from ttball.hostcpu import cpu_shares, cpu_ticks


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    """The backend named by ``args`` around the default weights, and its weights' config."""
    import torch

    from ttball.backends import create

    model = load_weights(args.weights, args.input_size)
    return create(args.backend, model, torch.device(args.device)), model.config


def _lane(args: argparse.Namespace, batch: int, sessions: int, blobs: list[bytes],
          own_stream: bool) -> dict[str, Any]:
    """One pipeline of a process with its own backend (a CUDA-graph backend's input and
    output buffers can't be shared between threads) and, with ``own_stream`` on CUDA, its own
    stream (a lane of several; one lane alone keeps the default stream, as the rows before
    lanes did); built and warmed on that stream."""
    import torch

    from ttball.kernels.prepost import JpegDecoder, StageTimer

    backend, config = _load(args)
    cuda = backend.device.type == "cuda"
    stream = torch.cuda.Stream(backend.device) if cuda and own_stream else None
    if args.network_only:
        from ttball.backends.base import random_windows

        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            backend.warmup([batch], *config.input_size)
            windows = random_windows(batch, *config.input_size, backend.device)
            for _ in range(3):  # the graph's first replays
                backend(windows)
            if cuda:
                torch.cuda.current_stream(backend.device).synchronize()
        return {"backend": backend, "pipeline": None, "per_push": batch * args.step,
                "stream": stream, "windows": windows}
    with torch.cuda.stream(stream) if stream is not None else nullcontext():
        backend.warmup(sorted({*WARM_SIZES, batch}), *config.input_size)
        pipeline, per_push = open_pipeline(
            backend, config, sessions, batch, args.step,
            JpegDecoder(backend.device, library=args.decoder), StageTimer(backend.device),
            blobs=None if args.aligned_phases else blobs, overlap=True,
            resize=args.resize)
        offset = 0
        for _ in range(3):  # warm: the resize's compile, the graphs, the decoder's buffers
            pipeline.push(feed(blobs, sessions, per_push, offset))
            offset += per_push
        pipeline.flush()
    return {"backend": backend, "pipeline": pipeline, "per_push": per_push, "stream": stream,
            "sessions": sessions, "offset": offset}


def _push_for(lane: dict[str, Any], blobs: list[bytes], seconds: float) -> dict[str, Any]:
    """Push ``lane``'s frames on its stream for ``seconds``; its frames, rows and latencies."""
    import torch

    if lane["pipeline"] is None:
        return _calls_for(lane, seconds)

    pipeline, per_push, sessions = lane["pipeline"], lane["per_push"], lane["sessions"]
    offset = lane["offset"]
    latencies, frames, rows = [], 0, 0
    with torch.cuda.stream(lane["stream"]) if lane["stream"] is not None else nullcontext():
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            chunk = feed(blobs, sessions, per_push, offset)
            offset += per_push
            t0 = time.perf_counter()
            done = pipeline.push(chunk)
            latencies.append(1e3 * (time.perf_counter() - t0))
            frames += len(chunk)
            rows += sum(len(r) for r in done.values())
        rows += sum(len(r) for r in pipeline.flush().values())
        elapsed = time.perf_counter() - start
    return {"frames": frames, "rows": rows, "elapsed": elapsed, "latencies": latencies}


def _calls_for(lane: dict[str, Any], seconds: float) -> dict[str, Any]:
    """``--network-only``: ``lane``'s backend on its fixed windows, on its stream, each call
    waited for, for ``seconds``; "frames" are ``--step`` a window."""
    import torch

    backend, windows = lane["backend"], lane["windows"]
    latencies, frames = [], 0
    with torch.cuda.stream(lane["stream"]) if lane["stream"] is not None else nullcontext():
        cuda = backend.device.type == "cuda"
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            backend(windows)
            if cuda:
                torch.cuda.current_stream(backend.device).synchronize()
            latencies.append(1e3 * (time.perf_counter() - t0))
            frames += lane["per_push"]
        elapsed = time.perf_counter() - start
    return {"frames": frames, "rows": 0, "elapsed": elapsed, "latencies": latencies}


def _child(rank: int, args: argparse.Namespace, batch: int, sessions: int, lanes: int,
           blobs: list[bytes], barrier: Any, deadline_s: float, results: Any) -> None:
    """One worker process: build and warm its ``lanes`` pipelines (the sessions split among
    them), wait for the other processes, push until ``seconds`` pass (with several lanes,
    one thread a lane, so their kernels share this process's CUDA context)."""
    started, start_s = time.perf_counter(), None
    try:
        import torch

        torch.set_num_threads(max(1, args.threads))
        built = [_lane(args, batch, sessions // lanes, blobs, lanes > 1) for _ in range(lanes)]
        pipelines = [lane["pipeline"] for lane in built if lane["pipeline"] is not None]
        if lanes > 1:  # a capture fails while another lane's thread works: none from here on
            for lane in built:
                freeze = (lane["pipeline"].freeze_graphs if lane["pipeline"] is not None
                          else getattr(lane["backend"], "freeze_graphs", None))
                if freeze is not None:
                    freeze()
        if built[0]["backend"].device.type == "cuda":
            torch.cuda.synchronize(built[0]["backend"].device)
        start_s = time.perf_counter() - started
        barrier.wait(timeout=max(1.0, deadline_s - time.time()))
        if lanes == 1:
            runs = [_push_for(built[0], blobs, args.seconds)]
        else:
            with ThreadPoolExecutor(lanes) as pool:
                runs = list(pool.map(lambda lane: _push_for(lane, blobs, args.seconds), built))
        elapsed = max(r["elapsed"] for r in runs)
        frames = sum(r["frames"] for r in runs)
        results.put({"rank": rank, "start_s": start_s,
                     "frames": frames, "rows_out": sum(r["rows"] for r in runs),
                     "elapsed_s": elapsed, "frames_per_s": frames / elapsed,
                     "frames_per_push": built[0]["per_push"],
                     "latencies_ms": [t for r in runs for t in r["latencies"]],
                     "decoder": pipelines[0].decoder.kind if pipelines else None,
                     "uncaptured_calls": (sum(p.uncaptured for p in pipelines) if pipelines
                                          else sum(getattr(b["backend"], "uncaptured_calls", 0)
                                                   for b in built)),
                     "fallback_share": max((p.fallbacks / max(p.heatmaps, 1) for p in pipelines),
                                           default=0.0)})
    except threading.BrokenBarrierError:  # another process failed, or the start timed out
        results.put({"rank": rank, "start_s": start_s, "error": (
            f"not every process was ready within --start-timeout-s {args.start_timeout_s:g} "
            f"(this one after {start_s:.0f} s; each builds and warms its lanes one after "
            "another), or another process failed")})
    except BaseException as exc:  # noqa: BLE001  (reported to the parent, which goes on)
        barrier.abort()
        results.put({"rank": rank, "error": f"{type(exc).__name__}: {exc}",
                     "trace": traceback.format_exc()})


# nvidia-smi's fields and the names of their means in a row
GPU_FIELDS = {"utilization.gpu": "gpu_util_pct", "power.draw": "gpu_power_w",
              "clocks.sm": "gpu_sm_clock_mhz"}


def _gpu_sample() -> tuple[float, ...] | None:
    """The first GPU's utilization (%), power draw (W) and SM clock (MHz) now, from
    ``nvidia-smi``; None without it. Utilization is the share of time some kernel ran, however
    few SMs it kept busy; the power says how much work they did."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=5, check=True).stdout
        values = tuple(float(v) for v in out.splitlines()[0].split(","))
        return values if len(values) == len(GPU_FIELDS) else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def sample_load(seconds: float, every_s: float = 0.5) -> dict[str, Any]:
    """The host's CPU busy share over ``seconds`` and the GPU's utilization, power and SM
    clock sampled every ``every_s`` (None where this machine can't tell)."""
    first, gpu = cpu_ticks(), []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sample = _gpu_sample()
        if sample is not None:
            gpu.append(sample)
        time.sleep(max(0.0, min(every_s, end - time.perf_counter())))
    shares = cpu_shares(first, cpu_ticks())
    cpu = shares["busy_pct"] if shares is not None else None
    means = (dict(zip(GPU_FIELDS.values(), map(float, np.mean(gpu, axis=0)))) if gpu
             else dict.fromkeys(GPU_FIELDS.values()))
    return {"cpu_busy_pct": cpu, "cores": os.cpu_count(), **means, "gpu_samples": len(gpu)}


def run_row(args: argparse.Namespace, procs: int, batch: int, blobs: list[bytes],
            lanes: int = 1) -> dict[str, Any]:
    """``procs`` children of ``lanes`` pipelines each at ``batch`` windows a push, the
    sessions split evenly."""
    ctx = mp.get_context("spawn")
    sessions = args.sessions // procs
    barrier, results = ctx.Barrier(procs + 1), ctx.Queue()  # the parent samples the load
    deadline = time.time() + args.start_timeout_s
    children = [ctx.Process(target=_child, args=(r, args, batch, sessions, lanes, blobs,
                                                 barrier, deadline, results))
                for r in range(procs)]
    for child in children:
        child.start()
    load: dict[str, Any] = {}
    try:
        barrier.wait(timeout=max(1.0, deadline - time.time()))
        load = sample_load(args.seconds)
    except threading.BrokenBarrierError:  # a child failed before it: its report says why
        pass
    reports = []
    wait_until = deadline + args.seconds + 60
    while len(reports) < procs and time.time() < wait_until:
        try:
            reports.append(results.get(timeout=max(0.1, wait_until - time.time())))
        except Exception:  # noqa: BLE001  (queue.Empty: a child died without a report)
            break
    for child in children:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    row: dict[str, Any] = {"procs": procs, "batch": batch, "lanes": lanes,
                           "sessions": sessions // lanes * lanes * procs,
                           "sessions_per_proc": sessions // lanes * lanes, **load}
    errors = [r for r in reports if "error" in r]
    if errors or len(reports) < procs:
        errors.sort(key=lambda r: "trace" not in r)  # a process's own failure before the
        row["error"] = (errors[0]["error"] if errors  # barriers it broke for the others
                        else f"{procs - len(reports)} of {procs} processes sent no report")
        row["reports"] = [{k: v for k, v in r.items() if k != "latencies_ms"} for r in reports]
        return row
    lat = np.concatenate([np.asarray(r["latencies_ms"]) for r in reports])
    per_push = reports[0]["frames_per_push"]
    gather_ms = 1e3 * per_push / (60.0 * (sessions // lanes))  # a push's frames at 60 fps
    row.update({
        "network_only": bool(args.network_only),
        "frames_per_s": sum(r["frames_per_s"] for r in reports),
        "windows_per_s": sum(r["frames_per_s"] for r in reports) / args.step
        if args.network_only else None,
        "frames_per_s_each": [round(r["frames_per_s"], 1) for r in sorted(reports, key=lambda r: r["rank"])],
        "frames_per_push": per_push, "pushes": int(lat.size),
        "rows_out": sum(r["rows_out"] for r in reports),
        "push_ms_p50": float(np.percentile(lat, 50)), "push_ms_p99": float(np.percentile(lat, 99)),
        "gather_ms_at_60fps": None if args.network_only else gather_ms,
        "latency_ms_p99_at_60fps": (None if args.network_only
                                    else gather_ms + float(np.percentile(lat, 99))),
        "decoder": reports[0]["decoder"],
        "fallback_share": max(r["fallback_share"] for r in reports),
        "uncaptured_calls": sum(r["uncaptured_calls"] for r in reports),
        "start_s_max": max(r["start_s"] for r in reports),
    })
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--backend", default="triton-fp16-direct")
    parser.add_argument("--weights", default=None, help="default: the packaged weights")
    parser.add_argument("--rows", default="1x32,2x32,4x16,4x32",
                        help="PROCESSESxBATCH[xLANES] per row, comma-separated: BATCH windows "
                             "a push, LANES pipelines a process (default 1), each in a thread "
                             "with its own backend and CUDA stream")
    parser.add_argument("--sessions", type=int, default=200, help="in all, split evenly")
    parser.add_argument("--frames", type=int, default=90, help="distinct JPEG frames")
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--step", type=int, default=3, choices=(1, 3))
    parser.add_argument("--seconds", type=float, default=8.0, help="pushing, per row")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per process")
    parser.add_argument("--decoder", default="nvjpeg")
    parser.add_argument("--resize", default="eager", choices=("eager", "compile", "triton"))
    parser.add_argument("--compile-resize", dest="resize", action="store_const", const="compile")
    parser.add_argument("--aligned-phases", action="store_true",
                        help="every session's windows in phase (bursts; the rows before the "
                             "twentieth session's lanes); default: staggered")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the script")
    parser.add_argument("--input-size", default=None, help="HxW (72x128 for a CPU smoke test)")
    parser.add_argument("--start-timeout-s", type=float, default=120.0,
                        help="for every process of a row to build and warm")
    parser.add_argument("--budget-s", type=float, default=300.0,
                        help="no new row after this many seconds")
    parser.add_argument("--tag", default="", help="recorded with the results, e.g. mps")
    parser.add_argument("--network-only", action="store_true",
                        help="each lane runs only its backend on BATCH fixed windows, back to "
                             "back (frames: --step a window)")
    args = parser.parse_args()
    try:
        plan = [tuple(int(v) for v in row.split("x")) for row in args.rows.split(",")]
    except ValueError:
        parser.error(f"--rows {args.rows!r}: PROCESSESxBATCH[xLANES], comma-separated "
                     "(e.g. 2x32,4x16,1x32x4)")
    if any(len(row) not in (2, 3) or min(row) < 1 for row in plan):
        parser.error(f"--rows {args.rows!r}: PROCESSESxBATCH[xLANES], all positive")
    plan = [(row[0], row[1], row[2] if len(row) == 3 else 1) for row in plan]
    if args.sessions < max(p * lanes for p, _, lanes in plan):
        parser.error(f"--sessions {args.sessions}: fewer than the most pipelines of --rows")
    batches = sorted({b for _, b, _ in plan})
    started = time.perf_counter()
    import torch

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_e2e_procs.py needs a CUDA GPU (or --device cpu for a smoke test)")
    results: dict[str, Any] = {"environment": environment(device), "args": vars(args),
                               "mps_pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"), "rows": []}
    blobs, results["frames"] = make_frames(args.frames, args.quality)
    t0 = time.perf_counter()
    backend, config = _load(args)  # the tuner's choices and the kernels into the cache
    backend.warmup(sorted({*WARM_SIZES, *batches}), *config.input_size)
    results["parent_build_s"] = time.perf_counter() - t0
    del backend
    if device.type == "cuda":
        torch.cuda.empty_cache()
    for p, b, lanes in plan:
        if time.perf_counter() - started > args.budget_s:
            results["rows"].append({"procs": p, "batch": b, "lanes": lanes,
                                    "skipped": "time budget"})
            continue
        row = run_row(args, p, b, blobs, lanes)
        print(json.dumps({k: v for k, v in row.items() if k != "reports"}), flush=True)
        results["rows"].append(row)
        Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()

"""JPEG decoding spread over processes on one GPU: does the aggregate rate grow with the
processes, as ``serve --ray``'s replicas need it to, or is the decoder shared?

Each of P processes (spawned, each with its own CUDA context, or its own MPS client when an MPS
daemon runs) opens a :class:`ttball.kernels.prepost.JpegDecoder`, decodes batches of ``--batch``
real frames in a loop for ``--seconds`` (each call to the end of its decode, as a replica's lane
waits for it), and reports its frames and the time of each call; the processes start together
at a barrier. Optionally one more process keeps the SMs busy part of the time with FP16
matmuls (``--busy-duty``: the share of each 10 ms it queues work), as the replicas' network
does::

    PYTHONPATH=. python scripts/gpu_jpeg_procs.py --video real_rally_a.mp4 --procs 1,2,4,8 \\
        --library nvjpeg --batch 32 --seconds 4 [--busy-duty 0.4] --out procs.json

One row per process count: frames/s of all the processes together, the median and p99 ms of
one call, and frames/s per process. If the aggregate stops growing at some P while each call
slows, the decoder (the JPEG engines, or what the library serializes across processes) is
shared, and its aggregate is a ceiling for every replica together.

``--ahead-ms MS``: each process queues MS of matmuls on another of its streams before each
call and waits for them after it; a call that then takes MS longer waits for its own process's
other GPU work (on the H200 torchvision's nvJPEG does: 26.3 ms against 9.7,
``docs/benchmarks/e2e.md``, "Twenty-eighth session"). ``--vary``: batches that change from call
to call, from a third of ``--batch`` to all of it.

What the wait is: ``--ahead-kind`` ``mm`` (4096² FP16 matmuls that each fill the GPU), ``small``
(element-wise adds of about 20 µs each, as the network's many small kernels) or ``sleep`` (one
kernel of one thread that spins for the time, leaving every SM but one free). A decode that waits
as long behind ``sleep`` waits for the work to finish (a device-wide synchronization inside the
library); one that waits behind ``mm`` only waits for SMs (its kernels queued behind the others),
which a decode stream of a higher ``--priority`` (-1; CUDA's default is 0, the least urgent)
should jump. torchvision's nvJPEG decodes on a stream of its own, whatever ``--priority`` says.

``--busy-network N``: N more processes run the network itself (``--busy-backend``, default
``triton-fp16-direct``, on ``--busy-batch`` random windows), back to back, waiting for each call,
from before the first row to after the last, as ``serve --ray``'s replicas' lanes do beside their
decode children: each row then says what the decode got beside the network *and* what the
network got beside the decode (``network_windows_per_s``: the calls that ended in the row's
span), against the network alone (``network_alone``, measured for ``--seconds`` before the first
row). If both keep their rates alone, the GPU holds the two together; if they share a budget,
that is the worker's ceiling whatever its lanes do.

``--decode-processes N``: each process decodes through ``serve --decode-processes``'s
:class:`ttball.kernels.decode_process.DecoderProcess` (N children, the frames back through
shared device buffers) instead of in itself; the row adds the mean of its calls' split
(``split_ms``: ``DecoderProcess.last_seconds``, the slowest child's decode, its copies into the
buffer, the rest and that rest's parts on each side of the pipe).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing as mp
import queue
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttball.cli.loadtest import percentile
from ttball.kernels.decode_process import DecoderProcess
from ttball.kernels.prepost import JpegDecoder


def batch_sizes(batch: int, vary: bool) -> list[int]:
    """The batch of each call in turn: ``batch`` always, or with ``vary`` a cycle from a third
    of it to all of it (a replica's pushes change size from one to the next)."""
    if not vary:
        return [batch]
    return [max(1, batch * k // 6) for k in (2, 6, 3, 5, 4)]


AHEAD_KINDS = ("mm", "small", "sleep")


@dataclass(frozen=True)
class Load:
    """What each process of a row does.

    ``library`` decodes calls of ``batch`` frames (``vary``: :func:`batch_sizes`) for
    ``seconds``. ``ahead_ms``: before each call, queue about this much GPU work on another
    stream of the process, and wait for it after the call (as a lane's previous push still runs
    its network while the next one decodes): a call that takes as long as that work waits for
    its process's other streams inside the decoder. ``ahead_kind``: that work's kind
    (:data:`AHEAD_KINDS`); ``priority``: the decode stream's CUDA priority; ``children``:
    decode in that many child processes (:class:`DecoderProcess`), 0: in the process itself."""

    library: str
    batch: int
    seconds: float
    vary: bool = False
    ahead_ms: float = 0.0
    ahead_kind: str = "mm"
    priority: int = 0
    children: int = 0


def decode_worker(device_name: str, blobs: list[bytes], load: Load, barrier: Any,
                  results: Any) -> None:
    """One process's decode loop; its frames and call times (or its error) go to ``results``."""
    try:
        device = torch.device(device_name)
        library, children = load.library, load.children
        decoder: Any = (DecoderProcess(device, library=library, processes=children) if children
                        else JpegDecoder(device, library=library))
        if decoder.kind != library:
            raise RuntimeError(f"{library} unavailable: {decoder.gpu_reason}")
        pool = blobs * (load.batch // len(blobs) + 1)
        sizes = batch_sizes(load.batch, load.vary)
        cuda = device.type == "cuda"
        stream = torch.cuda.Stream(device, priority=load.priority) if cuda else None
        sync = stream.synchronize if stream is not None else (lambda: None)
        ahead = (_Ahead(device, load.ahead_ms, load.ahead_kind)
                 if cuda and load.ahead_ms > 0 else None)
        with torch.cuda.stream(stream) if cuda else contextlib.nullcontext():
            for size in sizes * 2:  # set-up and warm-up
                decoder(pool[:size])
            sync()
            barrier.wait(timeout=120)
            calls: list[float] = []
            splits: list[dict[str, float]] = []
            frames = 0
            start = time.perf_counter()
            stop = start + load.seconds
            while time.perf_counter() < stop:
                size = sizes[len(calls) % len(sizes)]
                if ahead is not None:
                    ahead.queue()
                t0 = time.perf_counter()
                decoder(pool[:size])
                sync()
                calls.append(time.perf_counter() - t0)
                if children:
                    splits.append(decoder.last_seconds)
                frames += size
                if ahead is not None:  # as a lane reads its previous push back
                    ahead.stream.synchronize()
            wall = time.perf_counter() - start
        if children:
            decoder.close()
        results.put({"frames": frames, "start": start, "wall_s": wall, "call_s": calls,
                     "splits": splits})
    except Exception as exc:  # noqa: BLE001  (reported in the row, not lost in a child's stderr)
        try:
            barrier.abort()
        finally:
            results.put({"error": f"{type(exc).__name__}: {exc}"})


def _matmuls(device: torch.device, ms: float) -> tuple[torch.Tensor, int]:
    """A half-precision 4096² matrix on ``device`` and how many of its squarings take ``ms``."""
    a = torch.randn(4096, 4096, device=device, dtype=torch.half)
    return a, _count(lambda: torch.mm(a, a), device, ms)


def _count(kernel: Callable[[], Any], device: torch.device, ms: float, trials: int = 20) -> int:
    """How many launches of ``kernel`` take about ``ms`` of GPU time, one after another."""
    kernel()
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(trials):
        kernel()
    torch.cuda.synchronize(device)
    return max(1, round(ms / 1e3 / ((time.perf_counter() - start) / trials)))


class _Ahead:
    """About ``ms`` of GPU work of ``kind`` (:data:`AHEAD_KINDS`) queued on a side stream."""

    def __init__(self, device: torch.device, ms: float, kind: str = "mm") -> None:
        if kind not in AHEAD_KINDS:
            raise ValueError(f"unknown ahead kind {kind!r} (one of {', '.join(AHEAD_KINDS)})")
        self.stream = torch.cuda.Stream(device)
        if kind == "mm":
            a, self.count = _matmuls(device, ms)
            self.kernel: Callable[[], Any] = lambda: torch.mm(a, a)
        elif kind == "small":
            x = torch.zeros(1 << 24, device=device, dtype=torch.half)  # 64 MB moved: ~20 µs
            self.kernel = lambda: x.add_(1)
            self.count = _count(self.kernel, device, ms, trials=500)
        else:  # one spinning thread: ms of time on the stream, next to nothing of the SMs
            self.kernel = lambda: torch.cuda._sleep(1_000_000)  # ~0.5 ms at 1.98 GHz
            self.count = _count(self.kernel, device, ms)

    def queue(self) -> None:
        with torch.cuda.stream(self.stream):
            for _ in range(self.count):
                self.kernel()


def busy_worker(duty: float, stop: Any, ready: Any) -> None:
    """FP16 matmuls for ``duty`` of each 10 ms, until ``stop`` is set."""
    a, count = _matmuls(torch.device("cuda"), duty * 10.0)
    ready.set()
    while not stop.is_set():
        t0 = time.perf_counter()
        for _ in range(count):
            torch.mm(a, a)
        torch.cuda.synchronize()
        time.sleep(max(0.0, 0.010 - (time.perf_counter() - t0)))


@dataclass(frozen=True)
class Network:
    """What each ``--busy-network`` process runs: ``backend`` on ``batch`` random windows of the
    default weights (at ``input_size``, ``HxW``, when given: a CPU smoke test's small frames)."""

    backend: str
    batch: int
    device: str = "cuda"
    input_size: str | None = None


def network_worker(net: Network, stop: Any, results: Any) -> None:
    """The network back to back until ``stop``: reports ``{"ready": True}`` once warm, then the
    end time of every call (``time.perf_counter``, which every process on the host shares)."""
    try:
        from gpu_e2e import load_weights

        from ttball.backends import create
        from ttball.backends.base import random_windows

        device = torch.device(net.device)
        model = load_weights(None, net.input_size)
        backend = create(net.backend, model, device)
        backend.warmup([net.batch], *model.config.input_size)
        windows = random_windows(net.batch, *model.config.input_size, device)
        sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (
            lambda: None)
        for _ in range(3):  # the graph's first replays
            backend(windows)
        sync()
        results.put({"ready": True})
        ends: list[float] = []
        while not stop.is_set():
            backend(windows)
            sync()
            ends.append(time.perf_counter())
        results.put({"ends": ends})
    except Exception as exc:  # noqa: BLE001  (reported, not lost in a child's stderr)
        results.put({"error": f"{type(exc).__name__}: {exc}"})


class BusyNetworks:
    """``count`` processes of :func:`network_worker`. :meth:`start` brings the first one up
    alone (it fills the tuner's and compilers' caches the others then read), then the rest;
    :meth:`stop` returns each process's call end times."""

    def __init__(self, ctx: Any, net: Network, count: int) -> None:
        self.ctx, self.net, self.count = ctx, net, count
        self.stop_event, self.results = ctx.Event(), ctx.Queue()
        self.workers: list[Any] = []

    def _spawn(self, count: int, timeout_s: float) -> None:
        for _ in range(count):
            w = self.ctx.Process(target=network_worker,
                                 args=(self.net, self.stop_event, self.results))
            w.start()
            self.workers.append(w)
        for _ in range(count):
            try:
                msg = self.results.get(timeout=timeout_s)
            except queue.Empty:
                raise RuntimeError(f"--busy-network: not warm after {timeout_s:.0f} s") from None
            if "error" in msg:
                raise RuntimeError(f"--busy-network: {msg['error']}")

    def start(self, timeout_s: float = 300.0) -> None:
        try:
            self._spawn(1, timeout_s)
            self._spawn(self.count - 1, timeout_s)
        except BaseException:
            self.kill()
            raise

    def stop(self, timeout_s: float = 60.0) -> list[list[float]]:
        self.stop_event.set()
        ends = []
        try:
            for _ in self.workers:
                msg = self.results.get(timeout=timeout_s)
                if "error" in msg:
                    raise RuntimeError(f"--busy-network: {msg['error']}")
                ends.append(msg["ends"])
        finally:
            self.kill()
        return ends

    def kill(self) -> None:
        for w in self.workers:
            w.join(timeout=5)
            if w.is_alive():
                w.kill()


def windows_per_s(ends: list[list[float]], batch: int, span: tuple[float, float]) -> float:
    """Windows a second of the calls that ended inside ``span`` (start, end), all processes."""
    t0, t1 = span
    calls = sum(1 for one in ends for t in one if t0 < t <= t1)
    return calls * batch / (t1 - t0)


def run_row(ctx: Any, device: str, blobs: list[bytes], procs: int, load: Load) -> dict[str, Any]:
    """``procs`` processes each running ``load`` at once: the row of their frames and calls."""
    barrier, results = ctx.Barrier(procs), ctx.Queue()
    args = (device, blobs, load, barrier, results)
    workers = [ctx.Process(target=decode_worker, args=args) for _ in range(procs)]
    for w in workers:
        w.start()
    outs: list[dict[str, Any]] = []
    deadline = time.monotonic() + load.seconds + 300
    while len(outs) < procs:
        try:
            outs.append(results.get(timeout=1.0))
        except queue.Empty:
            dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:  # a child that died before it reported
                for w in workers:
                    w.kill()
                why = f"a process exited with code {dead[0]}" if dead else "timed out"
                return {"procs": procs, "error": why}
    for w in workers:
        w.join(timeout=30)
    errors = [o["error"] for o in outs if "error" in o]
    if errors:
        return {"procs": procs, "error": errors[0]}
    calls = [c for o in outs for c in o["call_s"]]
    wall = max(o["wall_s"] for o in outs)
    frames = sum(o["frames"] for o in outs)
    splits = [split for o in outs for split in o["splits"]]
    split_ms = {key: 1e3 * statistics.fmean(split[key] for split in splits)
                for key in splits[0]} if splits else None
    span = (min(o["start"] for o in outs), max(o["start"] + o["wall_s"] for o in outs))
    return {"procs": procs, "batch": load.batch, "vary": load.vary, "ahead_ms": load.ahead_ms,
            "ahead_kind": load.ahead_kind, "priority": load.priority,
            "decode_processes": load.children, "split_ms": split_ms,
            "frames": frames, "frames_per_s": frames / wall,
            "per_proc_frames_per_s": [o["frames"] / o["wall_s"] for o in outs],
            "call_ms_median": 1e3 * statistics.median(calls),
            "call_ms_p99": 1e3 * percentile(calls, 99), "calls": len(calls), "span": span}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--video", required=True, help="frames from this video")
    p.add_argument("--frames", type=int, default=96)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--library", default="nvjpeg", help="comma-separated JpegDecoder libraries")
    p.add_argument("--procs", default="1,2,4,8")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--device", default="cuda", help="cpu (with --library cv2): a smoke test")
    p.add_argument("--busy-duty", type=float, default=0.0,
                   help="one more process keeps the SMs busy this share of the time (0: none)")
    p.add_argument("--vary", action="store_true",
                   help="each process's calls cycle through batches from a third of --batch to all")
    p.add_argument("--ahead-ms", type=float, default=0.0,
                   help="before each call, queue this many ms of matmuls on another stream of "
                        "the same process (a decode that waits for them waits for its process's "
                        "other streams)")
    p.add_argument("--ahead-kind", default="mm",
                   help="comma-separated kinds of that work: mm (matmuls filling the GPU), small "
                        "(~20 µs element-wise kernels), sleep (one spinning thread)")
    p.add_argument("--priority", default="0",
                   help="comma-separated CUDA priorities of the decode stream (-1: more urgent)")
    p.add_argument("--decode-processes", default="0",
                   help="comma-separated: decode through that many child processes each "
                        "(serve --decode-processes; 0: in the process itself)")
    p.add_argument("--busy-network", type=int, default=0,
                   help="this many more processes run the network back to back throughout")
    p.add_argument("--busy-backend", default="triton-fp16-direct")
    p.add_argument("--busy-batch", type=int, default=16, help="windows a call of the network")
    p.add_argument("--input-size", default=None,
                   help="HxW of the network's windows (default: the weights'; 72x128 on a CPU)")
    p.add_argument("--tag", default="", help="a label for the rows (e.g. mps, time slices)")
    args = p.parse_args()
    if args.busy_network < 0 or args.busy_batch < 1:
        raise SystemExit("--busy-network: 0 or more; --busy-batch: 1 or more")
    if not 0.0 <= args.busy_duty < 1.0:
        raise SystemExit("--busy-duty: a share in [0, 1)")
    kinds = args.ahead_kind.split(",")
    if unknown := [k for k in kinds if k not in AHEAD_KINDS]:
        raise SystemExit(f"--ahead-kind: {unknown[0]!r} is not one of {', '.join(AHEAD_KINDS)}")
    try:
        priorities = [int(n) for n in args.priority.split(",")]
        childrens = [int(n) for n in args.decode_processes.split(",")]
    except ValueError:
        raise SystemExit("--priority, --decode-processes: integers, got "
                         f"{args.priority!r}, {args.decode_processes!r}") from None

    from gpu_jpeg import video_frames

    blobs, frames = video_frames(args.video, args.frames, args.quality)
    ctx = mp.get_context("spawn")
    busy = None
    if args.busy_duty:
        stop, ready = ctx.Event(), ctx.Event()
        busy = ctx.Process(target=busy_worker, args=(args.busy_duty, stop, ready))
        busy.start()
        ready.wait(timeout=120)
    networks = None
    if args.busy_network:
        networks = BusyNetworks(ctx, Network(args.busy_backend, args.busy_batch, args.device,
                                             args.input_size), args.busy_network)
        networks.start()
        began = time.perf_counter()
        time.sleep(args.seconds)
        alone = (began, time.perf_counter())  # the network alone: before any decode row
    rows = []
    try:
        for library, procs, kind, priority, children in itertools.product(
                args.library.split(","), (int(n) for n in args.procs.split(",")), kinds,
                priorities, childrens):
            load = Load(library, args.batch, args.seconds, args.vary, args.ahead_ms, kind,
                        priority, children)
            row = {"library": library, "tag": args.tag, "busy_duty": args.busy_duty,
                   **run_row(ctx, args.device, blobs, procs, load)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        if busy is not None:
            stop.set()
            busy.join(timeout=30)
        ends = networks.stop() if networks is not None else None
    out: dict[str, Any] = {"frames": frames, "rows": rows}
    if ends is not None:
        out["network"] = {"processes": args.busy_network, "backend": args.busy_backend,
                          "batch": args.busy_batch,
                          "alone_windows_per_s": windows_per_s(ends, args.busy_batch, alone)}
        print(f"network alone: {out['network']['alone_windows_per_s']:.0f} windows/s")
        for row in rows:
            if "span" in row:
                row["network_windows_per_s"] = windows_per_s(ends, args.busy_batch, row["span"])
                print(f"{row['procs']} x {row['batch']}: {row['frames_per_s']:.0f} frames/s "
                      f"beside {row['network_windows_per_s']:.0f} windows/s")
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

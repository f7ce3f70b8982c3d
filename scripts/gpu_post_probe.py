"""Does an overlapped push's postprocess take its thread's CPU while the GPU is busy?

In the worker (thirty-sixth session) a lane's postprocess stage is ~3 ms a push with
``--backend null`` and 16-19 ms with the network, 73-87 % of it on the thread's CPU, and a
second push in flight (``--pipeline-depth 2``) does not shorten it. Here, in one process: a
:class:`~ttball.kernels.prepost.GpuPipeline` with overlap pushes ``--sessions`` sessions' frames
(one window each a push) through a fake network that keeps the GPU busy ``--busy-ms`` a call
(``torch.cuda._sleep``: one spinning thread, every other SM free) and reports, per busy time and
depth, each push stage's wall and CPU ms a push (``postprocess`` and its parts ``post_launch``,
``post_wait``, ``post_read``). Then each host call that ``post_launch`` makes, timed alone
right behind ``--busy-ms`` of queued GPU work (``ops``: wall and CPU ms, median).

    PYTHONPATH=. python scripts/gpu_post_probe.py --out post.json [--busy-ms 0,30]

``--device cpu`` runs it without a GPU (no busy work, no CUDA calls: a smoke test).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch import Tensor

from ttball.backends.base import BackendBase
from ttball.bench.timing import cycles_per_ms
from ttball.frames import host_to_device
from ttball.kernels.prepost import GpuPipeline, JpegDecoder
from ttball.model.config import WeightsConfig
from ttball.stream import StreamOptions

STAGES = ("decode", "preprocess", "network", "postprocess", "post_launch", "post_wait",
          "post_read", "track")


class BusyBackend(BackendBase):
    """Heatmaps bright where the frames are, after ``cycles`` of one spinning GPU thread."""

    name = "busy"

    def __init__(self, device: torch.device, cycles: int) -> None:
        super().__init__(device)
        self.cycles = cycles

    def run(self, batch: Tensor) -> Tensor:
        if self.cycles and batch.device.type == "cuda":
            torch.cuda._sleep(self.cycles)
        b, _, h, w = batch.shape
        return 4.0 * (batch.view(b, 3, 3, h, w).mean(2) - 0.7)


def frames(count: int, size: tuple[int, int]) -> list[bytes]:
    """``count`` distinct JPEGs of a ball on a table, ``size`` (w, h)."""
    out = []
    for i in range(count):
        img = np.full((size[1], size[0], 3), (30, 90, 40), np.uint8)
        cv2.circle(img, (20 + 7 * i % (size[0] - 40), size[1] // 2), 6, (255, 255, 255), -1)
        out.append(cv2.imencode(".jpg", img)[1].tobytes())
    return out


def run_pipeline(device: torch.device, cycles: int, depth: int, sessions: int, pushes: int,
                 blobs: list[bytes]) -> dict[str, Any]:
    """Per stage, wall and CPU ms a push over ``pushes`` pushes after five of warm-up."""
    config = WeightsConfig()
    decoder = JpegDecoder(device) if device.type == "cuda" else JpegDecoder("cpu")
    pipeline = GpuPipeline(BusyBackend(device, cycles), config, decoder=decoder,
                           batch_sizes=(sessions,), overlap=True, depth=depth)
    ids = [f"s{k}" for k in range(sessions)]
    for sid in ids:
        pipeline.open(sid, StreamOptions(step=3), 60.0)
    n = 0

    def push() -> None:
        nonlocal n
        batch = [(sid, blobs[(n + j + k) % len(blobs)]) for j in range(3)
                 for k, sid in enumerate(ids)]
        n += 3
        pipeline.push(batch)

    for _ in range(5):
        push()
    wall0, cpu0 = dict(pipeline.timer.seconds), dict(pipeline.timer.cpu_seconds)
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(pushes):
        push()
    elapsed, on_cpu = time.perf_counter() - start, time.thread_time() - cpu
    pipeline.flush()
    rows = {stage: {"wall_ms": 1e3 * (pipeline.timer.seconds.get(stage, 0.0) - wall0.get(stage, 0.0)) / pushes,
                    "cpu_ms": 1e3 * (pipeline.timer.cpu_seconds.get(stage, 0.0) - cpu0.get(stage, 0.0)) / pushes}
            for stage in STAGES}
    return {"push_ms": 1e3 * elapsed / pushes, "push_cpu_ms": 1e3 * on_cpu / pushes,
            "frames_per_s": 3 * sessions * pushes / elapsed, "stages": rows}


def time_ops(device: torch.device, cycles: int, reps: int) -> dict[str, dict[str, float]]:
    """Each of ``post_launch``'s host calls alone behind ``cycles`` of queued GPU work: wall
    and CPU ms, median of ``reps``."""
    if device.type != "cuda":
        return {}
    packed = torch.zeros(48, 65, device=device)
    static = torch.zeros(16, 3, 72, 128, device=device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = static.amax(dim=(2, 3))
    ops: dict[str, Callable[[], object]] = {
        "thresholds_upload": lambda: host_to_device(torch.tensor([0.5] * 48), device),
        "pin_memory_alloc": lambda: torch.empty(packed.shape, pin_memory=True),
        "copy_to_pinned": lambda: torch.empty(packed.shape, pin_memory=True).copy_(
            packed, non_blocking=True),
        "graph_replay": graph.replay,
        "event_record": lambda: torch.cuda.Event().record(),
        "clone_28mb": lambda: torch.empty(7 << 20, device=device).clone(),
    }
    got: dict[str, dict[str, float]] = {}
    for name, op in ops.items():
        walls, cpus = [], []
        for _ in range(reps):
            if cycles:
                torch.cuda._sleep(cycles)
            start, cpu = time.perf_counter(), time.thread_time()
            op()
            walls.append(1e3 * (time.perf_counter() - start))
            cpus.append(1e3 * (time.thread_time() - cpu))
            torch.cuda.synchronize()
        got[name] = {"wall_ms": statistics.median(walls), "cpu_ms": statistics.median(cpus),
                     "max_wall_ms": max(walls)}
    del out
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--busy-ms", default="0,30", help="GPU work a call, ms (comma list)")
    parser.add_argument("--depths", default="1,2")
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--pushes", type=int, default=40)
    parser.add_argument("--reps", type=int, default=20, help="repetitions of each op")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    per_ms = cycles_per_ms(device) if device.type == "cuda" else 0.0  # no spin on the CPU
    blobs = frames(30, (640, 360))
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda"
                              else "cpu", "torch": torch.__version__, "cycles_per_ms": per_ms,
                              "sessions": args.sessions, "runs": [], "ops": {}}
    for busy in [float(b) for b in args.busy_ms.split(",")]:
        cycles = int(busy * per_ms)
        for depth in [int(d) for d in args.depths.split(",")]:
            row = run_pipeline(device, cycles, depth, args.sessions, args.pushes, blobs)
            result["runs"].append({"busy_ms": busy, "depth": depth, **row})
            parts = " ".join(f"{s} {v['wall_ms']:.2f}/{v['cpu_ms']:.2f}"
                             for s, v in row["stages"].items())
            print(f"busy {busy:g} ms depth {depth}: push {row['push_ms']:.2f} ms "
                  f"(cpu {row['push_cpu_ms']:.2f}), {row['frames_per_s']:.0f} frames/s; "
                  f"wall/cpu ms a push: {parts}", flush=True)
        result["ops"][str(busy)] = time_ops(device, cycles, args.reps)
        for name, v in result["ops"][str(busy)].items():
            print(f"  busy {busy:g} ms, {name}: wall {v['wall_ms']:.3f} ms (max "
                  f"{v['max_wall_ms']:.3f}), cpu {v['cpu_ms']:.3f}", flush=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

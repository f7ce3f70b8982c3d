"""Where a training step's time goes: waiting for data, the host, or the GPU.

Per step the main process is timed in three parts: ``wait`` (blocked on the next batch),
``host`` (copying the batch to the device, drawing targets, launching forward, backward and
the optimiser step) and ``sync`` (then waiting for the GPU to finish, at the loss read-out).
The workers time themselves per window (``Window.cost``): CPU seconds, wall seconds inside the
worker (more than the CPU seconds: the worker was short of a core), and wall seconds outside it
(collating, queueing, waiting to be asked for more: the main process, not the workers, sets the
pace). ``data_only`` runs the loaders without a model, for the pipeline's own rate.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ttball.train import TrainConfig
    from ttball.train_data import Window


@dataclass
class StepProfile:
    """Running totals since ``reset``; ``summary`` turns them into ms per step and per window."""

    steps: int = 0
    windows: int = 0
    wait: float = 0.0
    host: float = 0.0
    sync: float = 0.0
    worker: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    bytes: int = 0
    started: float = field(default_factory=time.perf_counter)
    cpu_started: float = field(default_factory=time.process_time)

    def add(self, batch: Window, wait: float, host: float = 0.0, sync: float = 0.0) -> None:
        self.steps += 1
        self.windows += batch.x.shape[0]
        self.wait, self.host, self.sync = self.wait + wait, self.host + host, self.sync + sync
        for k, v in enumerate(batch.cost.sum(0).tolist()):
            self.worker[k] += v
        self.bytes += sum(t.numel() * t.element_size() for t in batch)

    def summary(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.started
        steps, wins = max(self.steps, 1), max(self.windows, 1)
        out: dict[str, Any] = {
            "steps": self.steps,
            "windows_per_s": round(self.windows / max(wall, 1e-9), 1),
            "step_ms": round(1000 * wall / steps, 2),
            "wait_ms": round(1000 * self.wait / steps, 2),
            "host_ms": round(1000 * self.host / steps, 2),
            "sync_ms": round(1000 * self.sync / steps, 2),
            "main_cpu_ms_per_window": round(1000 * (time.process_time() - self.cpu_started) / wins, 3),
            "worker_cpu_ms_per_window": round(1000 * self.worker[0] / wins, 2),
            "worker_wall_ms_per_window": round(1000 * self.worker[1] / wins, 2),
            "worker_idle_ms_per_window": round(1000 * self.worker[2] / wins, 2),
            "kb_per_window": round(self.bytes / wins / 1e3, 1),
        }
        out["limit"] = _limit(out)
        return out


def _limit(s: dict[str, Any]) -> str:
    """Which part sets the pace: the data workers, the main process's host work, or the GPU."""
    if s["wait_ms"] > 0.2 * s["step_ms"]:
        return "data"
    return "gpu" if s["sync_ms"] > s["host_ms"] else "host"


def format_line(s: dict[str, Any]) -> str:
    return (f"{s['windows_per_s']:.0f} win/s, step {s['step_ms']:.1f} ms = wait {s['wait_ms']:.1f} "
            f"+ host {s['host_ms']:.1f} + sync {s['sync_ms']:.1f}; workers per window: "
            f"cpu {s['worker_cpu_ms_per_window']:.1f} ms, wall {s['worker_wall_ms_per_window']:.1f}, "
            f"idle {s['worker_idle_ms_per_window']:.1f}; main cpu "
            f"{s['main_cpu_ms_per_window']:.2f} ms/window; limit: {s['limit']}")


def next_batch(full: Iterator[Window] | None, crops: Iterator[Window], step: int, every: int) -> Iterator[Window]:
    """The loader step ``step`` draws from: whole frames every ``every``th step, else crops."""
    return full if full is not None and every and step % every == every - 1 else crops


def data_only(cfg: TrainConfig, steps: int, warmup: int = 0) -> dict[str, Any]:
    """Draw ``steps`` batches as training would (crops, and whole frames every
    ``full_frame_every``th step), without a model; the profile of the last ``steps - warmup``."""
    from ttball.train import make_loaders

    torch.manual_seed(cfg.seed)
    crops, fulls = make_loaders(cfg)
    prof = StepProfile()
    for step in range(steps):
        if step == warmup:
            prof = StepProfile()
        t0 = time.perf_counter()
        batch = next(next_batch(fulls, crops, step, cfg.full_frame_every))
        prof.add(batch, time.perf_counter() - t0)
    return prof.summary()

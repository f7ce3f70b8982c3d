"""Stages of the GPU measurement scripts (``gpu_kernels.py``, ``gpu_e2e.py``): a wall-clock
budget and a guard, so a failing or late stage is recorded in the results and the run goes on."""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


class Budget:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.perf_counter() + seconds

    def left(self) -> float:
        return self.deadline - time.perf_counter()


def guarded(results: dict, key: str, budget: Budget, fn: Callable[[], Any]) -> None:
    """``results[key] = fn()``, or the reason it was skipped or failed."""
    if budget.left() <= 0:
        results[key] = {"skipped": "time budget spent"}
        print(f"[{key}] skipped: time budget spent", flush=True)
        return
    start = time.perf_counter()
    try:
        results[key] = fn()
    except Exception as exc:  # noqa: BLE001  (a failing stage must not stop the run)
        results[key] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        print(f"[{key}] FAILED: {type(exc).__name__}: {exc}", flush=True)
    print(f"[{key}] {time.perf_counter() - start:.1f} s", flush=True)


def run_stages(results: dict, stages: dict[str, Callable[[], Any]], names: str, budget: Budget,
               out: str) -> None:
    """The comma-separated ``names`` of ``stages`` in order, each :func:`guarded`; the JSON at
    ``out`` is rewritten after every stage, so a run cut short keeps what it measured."""
    for key in names.split(","):
        print(f"== {key}", flush=True)
        guarded(results, key, budget, stages[key])
        Path(out).write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {out}", flush=True)


"""What the report records about the machine: hardware, versions, load and the environment
variables that change the figures."""

from __future__ import annotations

import os
import platform
from datetime import datetime
from typing import Any

import torch

# Environment variables that change the figures; the report records those that are set.
TIMING_ENV = ("THP_MEM_ALLOC_ENABLE", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_FX_GRAPH_CACHE")


def machine_info(device: torch.device, threads: int) -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(device),
        "threads": threads,
        "load_avg_1m": _load_average(),  # other work on the machine skews the times
        "env": {k: os.environ[k] for k in TIMING_ENV if k in os.environ},
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"

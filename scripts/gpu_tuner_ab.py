"""The Triton tuner's two clocks side by side (issue 9, batch 1): per variant and batch size,
the CUDA graph of the configurations chosen by timing each candidate's launches as the host
issues them (``group_ms``, the tuner until the eighth session) against those chosen by timing
their device work alone (``device_ms``, launches queued behind a spinning kernel).

At batch 1 a step's kernel runs 5–15 µs and its Python launch about 30–40 µs, so the first
clock ranks candidates by their launch path (``scripts/gpu_graph_bisect.py`` showed it: row
steps timed 15 µs faster alone made the graph 10 µs slower each). Both configuration lists are
replayed in the same executor's graph, alternating, on the same input.

    PYTHONPATH=. python3 scripts/gpu_tuner_ab.py --out tuner-ab.json [--batches 1,8]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_graph_bisect import graph_ms

from ttball.backends import create
from ttball.bench.timing import TimingPlan, group_ms
from ttball.kernels import executor as ex_mod
from ttball.model import BlurBall, randomize_batchnorm


def launch_clock(self: Any, fn: Any) -> float:
    """The tuner's clock before the eighth session: events around host-issued launches."""
    fn()
    return group_ms(fn, self.device, ex_mod.TUNE_REPS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="triton-fp16,triton-fp16-pdl,triton-fp16-rows")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--budget-s", type=float, default=400)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_tuner_ab.py needs a CUDA GPU")
    deadline = time.perf_counter() + args.budget_s
    dev = torch.device("cuda")
    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    report: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "rows": []}
    plan = TimingPlan(20, 7, 50)
    for batch in [int(b) for b in args.batches.split(",")]:
        x = torch.randn(batch, 9, 288, 512, device=dev)
        shape = tuple(x.shape)
        for variant in args.variants.split(","):
            if time.perf_counter() > deadline:
                report["rows"].append({"variant": variant, "batch": batch, "skipped": "budget"})
                continue
            device_timed = create(variant, model, dev)
            launch_timed = create(variant, model, dev)
            launch_timed.executor._time = types.MethodType(launch_clock, launch_timed.executor)  # type: ignore[attr-defined]
            start = time.perf_counter()
            device_timed.executor(x)  # type: ignore[attr-defined]
            tune_device_s = time.perf_counter() - start
            start = time.perf_counter()
            launch_timed.executor(x)  # type: ignore[attr-defined]
            tune_launch_s = time.perf_counter() - start
            ex = device_timed.executor  # type: ignore[attr-defined]
            mine = list(ex._configs[shape])
            theirs = list(launch_timed.executor._configs[shape])  # type: ignore[attr-defined]
            ms: dict[str, list[float]] = {"device_clock": [], "launch_clock": []}
            for _ in range(3):  # alternate: the machine's drift hits both
                ms["device_clock"].append(graph_ms(ex, x, mine, plan))
                ms["launch_clock"].append(graph_ms(ex, x, theirs, plan))
            row = {"variant": variant, "batch": batch,
                   "graph_ms": {k: min(v) for k, v in ms.items()}, "graph_ms_all": ms,
                   "steps_differing": sum(a != b for a, b in zip(mine, theirs, strict=True)),
                   "tune_s": {"device_clock": tune_device_s, "launch_clock": tune_launch_s},
                   "device_clock_configs": [c.short() for c in mine]}
            report["rows"].append(row)
            print(f"{variant:18s} b={batch:<3} graph ms: device clock "
                  f"{row['graph_ms']['device_clock']:.3f}, launch clock "
                  f"{row['graph_ms']['launch_clock']:.3f}; {row['steps_differing']} steps differ",
                  flush=True)
            Path(args.out).write_text(json.dumps(report, indent=1))
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

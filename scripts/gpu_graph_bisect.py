"""Which of a Triton variant's tuned steps make its CUDA graph slower than ``triton-fp16``'s?
(issue 9; the seventh session's ``triton-fp16-rows`` took 0.894 ms at batch 1 against 0.694,
though the tuner had timed each of its 19 row-walking steps faster alone:
``docs/benchmarks/triton-h200.md``, "Fourth and fifth steps, measured").

Tunes ``triton-fp16`` and the variant on the same weights and input, then replays one CUDA
graph of the variant's executor per configuration list: the variant's own choices, the
baseline's, and the variant's with one differing step at a time switched back to the
baseline's choice. Each step that differs is also timed alone with both configurations, with
many more launches than the tuner's three, as the host issues them and as device time alone
(``device_ms``). A step whose switch-back saves much more graph time than its alone-times
differ is where timing alone misleads. (Eighth session: at batch 1 the launch-issued times
were the host's launch path; the tuner now uses ``device_ms``, ``scripts/gpu_tuner_ab.py``.)

    PYTHONPATH=. python3 scripts/gpu_graph_bisect.py --variant triton-fp16-rows --batch 1 \
        --out bisect.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttball.backends import create
from ttball.backends.cudagraph import GraphCache
from ttball.bench.timing import TimingPlan, device_ms, time_calls
from ttball.model import BlurBall, randomize_batchnorm


def graph_ms(executor: Any, x: torch.Tensor, configs: list[Any], plan: TimingPlan) -> float:
    """Median ms of a call of ``executor``'s CUDA graph for ``x``'s shape, captured with
    ``configs`` (the backend's own ``GraphCache``: input copy, replay, output clone)."""
    shape = tuple(x.shape)
    kept = executor._configs[shape]
    executor._configs[shape] = configs
    try:
        graphs = GraphCache(executor, x.device, warmup=1)
        graphs(x)  # captures with ``configs``; every kernel is compiled already
    finally:
        executor._configs[shape] = kept
    return time_calls(lambda: graphs(x), x.device, plan)["median_ms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", default="triton-fp16-rows")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--height", type=int, default=288)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_graph_bisect.py needs a CUDA GPU")
    dev = torch.device("cuda")
    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    x = torch.randn(args.batch, 9, args.height, args.width, device=dev)
    shape = tuple(x.shape)
    base = create("triton-fp16", model, dev)
    ours = create(args.variant, model, dev)
    base.executor(x)  # type: ignore[attr-defined]  # tunes
    ours.executor(x)  # type: ignore[attr-defined]
    ex = ours.executor  # type: ignore[attr-defined]
    mine, theirs = list(ex._configs[shape]), list(base.executor._configs[shape])  # type: ignore[attr-defined]
    graph_plan, alone_plan = TimingPlan(20, 7, 50), TimingPlan(10, 5, 100)
    bufs = ex._buffers[shape]
    report: dict[str, Any] = {
        "variant": args.variant, "batch": args.batch, "gpu": torch.cuda.get_device_name(),
        "graph_ms": {"variant": graph_ms(ex, x, mine, graph_plan),
                     "baseline": graph_ms(ex, x, theirs, graph_plan)},
        "steps": [],
    }
    print(f"graph: {args.variant} {report['graph_ms']['variant']:.3f} ms, with triton-fp16's "
          f"choices {report['graph_ms']['baseline']:.3f} ms", flush=True)
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a == b:
            continue
        launch = ex.launches[i]
        alone = {name: time_calls(lambda c=cfg, la=launch: la(bufs.tensors, bufs.sums, c), dev,
                                  alone_plan)["median_ms"]
                 for name, cfg in (("variant", a), ("baseline", b))}
        alone_device = {name: device_ms(lambda c=cfg, la=launch: la(bufs.tensors, bufs.sums, c),
                                        dev, 100)
                        for name, cfg in (("variant", a), ("baseline", b))}
        switched = graph_ms(ex, x, mine[:i] + [b] + mine[i + 1:], graph_plan)
        row = {"step": i, "variant_config": a.short(), "baseline_config": b.short(),
               "alone_ms": alone, "alone_device_ms": alone_device,
               "graph_ms_switched_back": switched,
               "graph_saving_ms": report["graph_ms"]["variant"] - switched}
        report["steps"].append(row)
        print(f"#{i:<3} {a.short():>16} vs {b.short():<16} alone {1e3 * alone['variant']:7.1f} "
              f"vs {1e3 * alone['baseline']:7.1f} us (device "
              f"{1e3 * alone_device['variant']:5.1f} vs {1e3 * alone_device['baseline']:5.1f}); "
              f"switching back saves "
              f"{1e3 * row['graph_saving_ms']:7.1f} us of the graph", flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Where a batch-1 graph replay of triton-fp16-direct spends its time (issue 9, the contention
between HRNet's branches): one profiled run of several CUDA graph replays, each kernel's start,
end and stream, written as JSON for ``scripts/critical_path.py``-style analysis on the CPU.

    PYTHONPATH=. python3 scripts/gpu_graph_timeline.py --out timeline.json [--batch 1]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttball.backends import create
from ttball.model import BlurBall, randomize_batchnorm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--backend", default="triton-fp16-direct")
    parser.add_argument("--replays", type=int, default=10)
    args = parser.parse_args()
    dev = torch.device("cuda")
    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    backend = create(args.backend, model, dev)
    x = torch.randn(args.batch, 9, 288, 512, device=dev)
    for _ in range(20):  # tune, capture, warm
        backend(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(args.replays):
            backend(x)
            torch.cuda.synchronize()
    kernels = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels.append({"name": e.name, "start_us": e.time_range.start,
                            "end_us": e.time_range.end,
                            "stream": getattr(e, "device_resource_id", None)})
    kernels.sort(key=lambda k: k["start_us"])
    executor = getattr(backend, "executor", None)
    chosen = executor.tuned(tuple(x.shape)) if executor is not None else None
    Path(args.out).write_text(json.dumps({"backend": args.backend, "batch": args.batch,
                                          "replays": args.replays, "chosen": chosen,
                                          "kernels": kernels}))
    print(f"{len(kernels)} kernel records over {args.replays} replays; wrote {args.out}")


if __name__ == "__main__":
    main()

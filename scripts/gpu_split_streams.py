"""Does a batch run faster as sub-batches on streams of their own, in one CUDA graph? (issue 9)

At batch 64 ``triton-fp16-direct``'s kernels run one after another (its branches aside): each
kernel's last wave leaves SMs idle, and a memory-bound step never overlaps a compute-bound
one. Here the batch is split into S sub-batches, each run by an executor of its own (its own
buffers, the configurations the tuner chose for the sub-batch's shape) on a stream of its
own, all forked from and joined to one stream inside one CUDA graph. Per row: the ms of a
replay of that graph, windows/s, and the same S sub-batches run one after another in one
graph (the serial sum the concurrency has to beat). S = 1 is the executor's graph of the
whole batch (as ``ttball bench`` times it, without its copies in and out).

    PYTHONPATH=. python3 scripts/gpu_split_streams.py --out split.json --batch 64 --splits 1,2,4
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttball.backends import create
from ttball.backends.base import random_windows
from ttball.backends.cudagraph import GraphCache
from ttball.bench.timing import TimingPlan, time_calls
from ttball.kernels.buffers import Buffers
from ttball.kernels.executor import TritonExecutor
from ttball.model import BlurBall, randomize_batchnorm


def twin(ex: TritonExecutor, like: TritonExecutor, shape: tuple[int, ...]) -> None:
    """Give ``ex`` (built as ``like`` was, not tuned) ``like``'s configurations for ``shape``
    and buffers of its own, so both can run that shape at once."""
    ex._configs[shape] = list(like._configs[shape])
    ex._timed[shape] = like._timed[shape]
    ex._buffers[shape] = Buffers(like.plan, shape[0], shape[2], shape[3], like.device)


def graph_of(fn: Callable[[], None], anchor: Tensor) -> torch.cuda.CUDAGraph:
    """``fn`` captured as the backends capture (:meth:`GraphCache.capture`: warm-up runs on a
    side stream first); ``anchor``, a tensor on the device, stands for its unused input."""
    return GraphCache(lambda _: fn(), anchor.device, 2).capture(anchor, copy=False)[0]


def measure(backend: Any, parts: list[Tensor], make: Callable[[], Any],
            plan: TimingPlan) -> dict[str, float | int]:
    """One row: ``parts`` (sub-batches of one shape, already tuned by ``backend``) each on an
    executor and a stream of its own in one graph, then one after another in another."""
    dev, shape = parts[0].device, tuple(parts[0].shape)
    execs = [backend.executor]
    for _ in parts[1:]:
        other = make().executor
        twin(other, backend.executor, shape)
        execs.append(other)
    streams = [torch.cuda.Stream(dev) for _ in parts]

    def concurrent() -> None:
        main_stream = torch.cuda.current_stream(dev)
        for ex, part, stream in zip(execs, parts, streams):
            stream.wait_stream(main_stream)
            with torch.cuda.stream(stream):
                ex(part)
        for stream in streams:
            main_stream.wait_stream(stream)

    def serial() -> None:
        for ex, part in zip(execs, parts):
            ex(part)

    g_conc, g_serial = graph_of(concurrent, parts[0]), graph_of(serial, parts[0])
    conc = time_calls(g_conc.replay, dev, plan)["median_ms"]
    ser = time_calls(g_serial.replay, dev, plan)["median_ms"]
    # the last sub-batch's logits from the concurrent graph against the backend's own
    # executor running that sub-batch alone
    g_conc.replay()
    torch.cuda.synchronize(dev)
    got = execs[-1]._buffers[shape].logits.clone()
    alone = backend.executor(parts[-1]).clone()
    return {"splits": len(parts), "sub_batch": shape[0], "concurrent_ms": conc,
            "serial_ms": ser, "max_abs_diff": (got.float() - alone.float()).abs().max().item()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--backend", default="triton-fp16-direct")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--splits", default="1,2,4")
    parser.add_argument("--height", type=int, default=288)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_split_streams.py needs a CUDA GPU")
    dev = torch.device("cuda")
    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    splits = [int(s) for s in args.splits.split(",")]
    if any(args.batch % s for s in splits):
        sys.exit(f"--splits must divide --batch {args.batch}")
    backend = create(args.backend, model, dev)
    plan = TimingPlan(3, 7, 20)
    rows = []
    with torch.inference_mode():  # as the backend runs: its buffers are inference tensors
        x = random_windows(args.batch, args.height, args.width, dev)
        for s in splits:
            sub = args.batch // s
            parts = [x[k * sub:(k + 1) * sub].contiguous() for k in range(s)]
            backend(parts[0])  # tunes (and refines) the sub-batch's shape, captures its graph
            rows.append(measure(backend, parts, lambda: create(args.backend, model, dev), plan))
            row = rows[-1]
            row["windows_per_s"] = args.batch / row["concurrent_ms"] * 1e3
            print(json.dumps(row), flush=True)
    env = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "backend": args.backend, "batch": args.batch}
    args.out.write_text(json.dumps({"environment": env, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

"""The PTX of the Triton kernels the tuner chose (issue 9): after ``triton-fp16-direct`` is tuned
at a batch size, each step whose chosen configuration runs a Triton kernel (not the CUDA
direct or pair kernels) is compiled again from Triton's cache and its PTX counted:
``cp.async`` (pipelined loads into shared memory), ``ld.global``, ``ldmatrix``/``ld.shared``,
``mma``/``wgmma``, with the step's time alone from the tuner. (A Triton cache holds every
candidate the tuner tried, and its files do not say which one a step runs; the twenty-first
session found 21 of the 277 convolution candidates compiled without ``cp.async``.)

    PYTHONPATH=. python3 scripts/triton_ptx.py --out ptx.json [--batch 64]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_e2e import environment, load_weights

from ttball.backends import create
from ttball.kernels.executor import _name
from ttball.kernels.launches import ConvLaunch

PATTERNS = {"cp_async": r"cp\.async\.c[ag]\.", "ld_global": r"ld\.global",
            "ldmatrix": r"ldmatrix", "ld_shared": r"ld\.shared", "mma": r"\bmma\.sync",
            "wgmma": r"wgmma\.mma_async"}


def count(ptx: str) -> dict[str, int]:
    """How often each of :data:`PATTERNS` occurs in ``ptx``."""
    return {name: len(re.findall(pattern, ptx)) for name, pattern in PATTERNS.items()}


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--weights", default=None)
    args = parser.parse_args()
    device = torch.device("cuda")
    model = load_weights(args.weights, None)
    backend = create("triton-fp16-direct", model, device, records=False)  # its timings kept
    x = torch.randn(args.batch, 9, model.config.input_height, model.config.input_width,
                    device=device)
    backend(x)  # tunes every step for this shape
    executor, shape = backend.executor, tuple(x.shape)
    bufs = executor._buffers[shape]
    rows = []
    for i, (launch, cfg) in enumerate(zip(executor.launches, executor._configs[shape])):
        if isinstance(launch, ConvLaunch) and launch.runs_cuda(cfg):  # as candidate_calls
            continue
        compiled = launch.triton_call(bufs.tensors, bufs.sums, cfg).warmup()
        row = {"step": i, "name": _name(launch), "config": cfg.short(),
               "ms_alone": executor._timed[shape][i][0][0],
               "kernel": compiled.metadata.name, **count(compiled.asm["ptx"])}
        print(json.dumps(row), flush=True)
        rows.append(row)
    Path(args.out).write_text(json.dumps({"environment": environment(device),
                                          "batch": args.batch, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

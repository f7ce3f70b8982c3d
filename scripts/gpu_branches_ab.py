"""HRNet's branches on CUDA streams (``triton-fp16-branches``): which way of running them is
fastest at small batches (issue 9, batch 1)? Side by side in one process, same weights and
input, each variant's CUDA graph timed with CUDA events (7 groups of 50 replays, median):

- ``serial``: triton-fp16, one stream;
- ``branches``: each resolution level on a stream of its own;
- ``branches+pdl``: and programmatic dependent launch within each stream;
- ``branches+prio0``: level 0 (the full-resolution branch, most of the critical path) on a
  stream of higher priority, so its kernels get the SMs first when the branches compete;
- ``branches+prio0+pdl``;
- ``branches+direct``: and the tuner also tries the CUDA direct kernel (triton-fp16-direct),
  and its pair kernel for each residual block's two convolutions (each pair's timing against
  its two steps is printed and saved);
- ``branches+direct-nopair``: the same without the pair kernel;
- ``branches+direct-noinput``: without the direct kernel for the stem's first convolution
  (``conv3x3_input_kernel``, reading the FP32 NCHW input);
- ``branches+direct-notaps``: without the tap-partials kernel (``Config.taps``, transition1's
  128 → 16; forty-second session);
- ``branches+direct+pdl``, ``branches+direct+prio0``, ``branches+direct+prio0+pdl``: as for
  ``branches``, on top of the direct kernel;
- ``branches+refined``: and the steps' configurations are chosen again by timing the whole
  graph (triton-fp16-branches-refined; what it changed is printed and saved);
- ``branches+direct-noproject``: the plan without the coarse terms' projections
  (``build_plan(project_terms="off")``: branch 0's last tails compute the upsampled 1×1 terms
  at full resolution); ``branches+direct+projconv``: projected by 1×1 Conv steps of their own
  (``"conv"``) instead of in the tails that produce their sources (``"tail"``, the default);
- ``branches+direct+copy``: triton-fp16-direct as before the graphs that read a reused input
  buffer in place (``GraphCache``'s ``by_address`` off): every call copies the batch into the
  graph's static input.

The tuner runs once per variant (device clock); timing alternates over the variants three
times and keeps each one's best median, so drift hits all alike.

    PYTHONPATH=. python3 scripts/gpu_branches_ab.py --out branches-ab.json [--batches 1,2,8]
        [--variants branches,branches+direct]
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
from ttball.bench.timing import TimingPlan, time_calls
from ttball.kernels.plan import INPUT, Conv
from ttball.model import BlurBall, randomize_batchnorm

VARIANTS: dict[str, dict[str, Any]] = {
    "serial": {},
    "branches": {"branches": True},
    "branches+pdl": {"branches": True, "pdl": True},
    "branches+prio0": {"branches": True, "priority": (-2, 0, 0, 0)},
    "branches+prio0+pdl": {"branches": True, "pdl": True, "priority": (-2, 0, 0, 0)},
    "branches+direct": {"branches": True, "direct": True},
    "branches+direct-nopair": {"branches": True, "direct": True, "nopair": True},
    "branches+direct-noinput": {"branches": True, "direct": True, "noinput": True},
    "branches+direct-notaps": {"branches": True, "direct": True, "notaps": True},
    "branches+direct+pdl": {"branches": True, "direct": True, "pdl": True},
    "branches+direct+prio0": {"branches": True, "direct": True, "priority": (-2, 0, 0, 0)},
    "branches+direct+prio0+pdl": {"branches": True, "direct": True, "pdl": True,
                                  "priority": (-2, 0, 0, 0)},
    "branches+refined": {"branches": True, "refine": True},
    "branches+direct+copy": {"branches": True, "direct": True, "copy": True},
    "branches+direct-noproject": {"branches": True, "direct": True, "project": "off"},
    "branches+direct+projconv": {"branches": True, "direct": True, "project": "conv"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="1,2,8")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated, from: " + ", ".join(VARIANTS))
    parser.add_argument("--out", required=True)
    parser.add_argument("--show-steps", default="",
                        help="comma-separated plan steps whose best candidates to print")
    parser.add_argument("--show-top", type=int, default=3,
                        help="how many of each shown step's candidates, fastest first")
    args = parser.parse_args()
    chosen = {"serial", *args.variants.split(",")}  # serial: the reference of rel_vs_serial
    unknown = chosen - set(VARIANTS)
    if unknown:
        sys.exit(f"unknown variants: {', '.join(sorted(unknown))}")
    if not torch.cuda.is_available():
        sys.exit("gpu_branches_ab.py needs a CUDA GPU")
    dev = torch.device("cuda")
    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    plan = TimingPlan(20, 7, 50)
    report: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "priority_range": torch.cuda.Stream.priority_range(),
                              "rows": []}
    for batch in [int(b) for b in args.batches.split(",")]:
        x = torch.randn(batch, 9, 288, 512, device=dev)
        backends = {}
        for name, options in VARIANTS.items():
            if name not in chosen:
                continue
            options = dict(options)
            priority = options.pop("priority", None)
            nopair = options.pop("nopair", False)
            noinput = options.pop("noinput", False)
            copy_in = options.pop("copy", False)
            notaps = options.pop("notaps", False)
            # records=False: every arm tunes (the hacks below change what it may choose)
            backend = create("triton-fp16", model, dev, records=False, **options)
            if priority is not None:
                backend.executor.lane_priority = priority  # type: ignore[attr-defined]
            if nopair:  # the direct kernel, without the residual blocks' pair kernel
                backend.executor.pairs = []  # type: ignore[attr-defined]
            if noinput:  # the stem's first convolution by Triton, from the NHWC copy
                first = backend.executor.launches[0]  # type: ignore[attr-defined]
                assert isinstance(first.step, Conv) and first.step.terms[0].src == INPUT
                first.configs = (lambda bufs, f=first.configs:
                                 [c for c in f(bufs) if not c.direct])
            if notaps:  # the tuner's candidates without the tap-partials kernel
                for launch in backend.executor.launches:  # type: ignore[attr-defined]
                    if isinstance(launch.step, Conv):
                        launch.configs = (lambda bufs, f=launch.configs:
                                          [c for c in f(bufs) if not c.taps])
            if copy_in:  # no graphs reading the caller's buffer in place
                backend._graphs.by_address = 0  # type: ignore[attr-defined]
            backend(x)  # tunes (and refines), then captures on the next call
            backends[name] = backend
            executor = getattr(backend, "executor", None)
            trials = executor.pair_trials.get(tuple(x.shape), []) if executor else []
            for i, two, one, cfg, taken in trials:
                print(f"b={batch:<3} {name:20s} pair {i}/{i + 1}: two steps {two:.4f} ms, "
                      f"pair {one:.4f} ms ({cfg}){' taken' if taken else ''}", flush=True)
                report.setdefault("pairs", []).append(
                    {"batch": batch, "variant": name, "step": i, "two_ms": two, "pair_ms": one,
                     "config": cfg, "taken": taken})
            timed = executor._timed.get(tuple(x.shape), []) if executor else []
            for i in [int(v) for v in args.show_steps.split(",") if v]:
                for ms_i, cfg in (timed[i] if i < len(timed) else [])[:args.show_top]:
                    step = executor.plan.steps[i]  # type: ignore[union-attr]
                    what = getattr(step, "out", None) or f"tail of {step.y}"
                    print(f"b={batch:<3} {name:20s} step {i} ({what}): {cfg.short():24s} "
                          f"{1e3 * ms_i:8.1f} us", flush=True)
                    report.setdefault("candidates", []).append(
                        {"batch": batch, "variant": name, "step": i, "config": cfg.short(),
                         "ms": ms_i})
            refinement = getattr(backend, "refinements", {}).get(tuple(x.shape))
            if refinement is not None:
                print(f"b={batch:<3} {name:20s} refine: {refinement.summary()}", flush=True)
                report.setdefault("refinements", []).append(
                    {"batch": batch, "variant": name, **vars(refinement)})
        ms: dict[str, list[float]] = {name: [] for name in backends}
        for _ in range(3):
            for name, backend in backends.items():
                ms[name].append(time_calls(lambda b=backend, xb=x: b(xb), dev, plan)["median_ms"])
        want = backends["serial"](x).float()
        for name, backend in backends.items():
            got = backend(x).float()
            rel = ((got - want).norm() / want.norm()).item()
            row = {"batch": batch, "variant": name, "ms": min(ms[name]), "ms_all": ms[name],
                   "rel_vs_serial": rel}
            report["rows"].append(row)
            print(f"b={batch:<3} {name:20s} {row['ms']:.3f} ms  (rel {rel:.1e})", flush=True)
        Path(args.out).write_text(json.dumps(report, indent=1))
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Our Triton kernels (``triton-fp16``, issue 9) on one GPU: per conv shape against cuDNN, per
plan step against its bytes, and the whole network against eager in a CUDA graph.

Stages (each guarded: a failure is recorded in the JSON and the next stage runs; no new stage
starts after ``--budget-s``):

1. ``shapes``: every distinct single convolution of the network (Cin, Cout, k, stride, output
   resolution) at batch 1 and 64: our conv kernel (bias, no ReLU) with each candidate tile
   configuration vs ``F.conv2d`` FP16 channels_last with ``cudnn.benchmark``. Also our kernel's
   achieved GB/s (input read + output written once) and TFLOP/s. With ``--explore``, the 3×3
   shapes are also timed with :func:`explore_configs` (each variant feature alone and
   combined, not all in the tuner's list).
2. ``network``: ``triton-fp16`` vs ``cudagraph-fp16-folded-cl`` (eager, BN folded, FP16 weights,
   channels_last, one CUDA graph) at batch 1, 8, 64: ms/window, windows/s, max abs and relative
   error vs eager FP32 (TF32 off), first-call seconds (compile + tuning for ours).
3. ``steps``: each step of our plan alone at batch 1 and 64 with its tuned configuration:
   µs, bytes moved (:func:`ttball.kernels.plan.step_cost`), achieved GB/s; and the time of
   every candidate the tuner had for it (``candidates``: the first version's configurations
   and the second's variants, ``new`` = a 2-D tile, taps per K chunk or L1 gathers), with a
   per-batch summary: sum over steps of the best old and the best of all candidates.

Timing: CUDA events around groups of calls after warm-up, median of the group means; inputs are
already on the GPU (no host transfers); the backends' output clone is included. Random weights
with non-trivial BN statistics (``randomize_batchnorm``): speed does not depend on the values.

    PYTHONPATH=. python scripts/gpu_kernels.py --out gpu_kernels.json
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import math
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _stages import Budget, run_stages

from ttball.backends import create
from ttball.bench.accuracy import agreement
from ttball.bench.timing import device_ms
from ttball.kernels import build_plan, plan_cost
from ttball.kernels.plan import Conv, Plan, Term, step_cost
from ttball.model import BlurBall, randomize_batchnorm

EAGER_GRAPH = "cudagraph-fp16-folded-cl"
OURS = "triton-fp16"
OURS_TMA = "triton-fp16-tma"
OURS_ROWS = "triton-fp16-rows"
OURS_DIRECT = "triton-fp16-direct"
OURS_ALL = (OURS, OURS_TMA, OURS_ROWS, OURS_DIRECT)


def time_ms(fn: Callable[[], Any], warmup: int = 10, groups: int = 5, reps: int = 20) -> dict:
    """Median / min / max over ``groups`` of the mean device ms of ``reps`` calls, queued behind
    a spinning kernel (``device_ms``): what the calls cost in a CUDA graph, not their Python
    launch, which is longer than a batch-1 kernel (until the eighth session this timed the
    launches as issued, so the batch-1 figures of earlier runs are launch-bound)."""
    dev = torch.device("cuda")
    for _ in range(warmup):
        fn()
    means = [device_ms(fn, dev, reps) for _ in range(groups)]
    return {"median_ms": statistics.median(means), "min_ms": min(means), "max_ms": max(means)}


# --- stage 1: conv shapes ------------------------------------------------------------------

def conv_shapes(plan: Plan) -> list[dict[str, int]]:
    """Distinct single convolutions (terms read at their own resolution) of the plan."""
    seen: dict[tuple[int, ...], dict[str, int]] = {}
    for step in plan.steps:
        if not isinstance(step, Conv):
            continue
        for t in step.terms:
            if t.up:
                continue
            level = plan.buffers[step.out].level
            key = (t.cin, t.weight.shape[0], t.ksize, t.stride, level)
            seen.setdefault(key, dict(zip(("cin", "cout", "k", "stride", "level"), key)))
    return list(seen.values())


def is_new(cfg: Any) -> bool:
    """A variant of the second, fourth, fifth or eighth step (2-D tile, taps per K chunk, L1
    gathers, TMA, row walking, the CUDA direct kernel)?"""
    return any(getattr(cfg, f, 0) for f in ("tile_w", "k_chunk", "l1", "tma", "rows", "direct"))


def explore_configs(step: Conv, pixels: int) -> list[Any]:
    """Variants beyond the tuner's list for 3×3 shapes: each feature alone, then combined with
    other stage counts and tiles (which of L1, tile and taps pays, measured one by one)."""
    from ttball.kernels.configs import Config, rows_applies, tma_applies

    if not any(t.ksize == 3 for t in step.terms):
        return []
    bm = 128 if pixels >= 132 * 128 else 64
    tma = [  # fourth step: TMA boxes, tile shapes and pipeline depths
        Config(bm, 4, 2, tile_w=16, tma=True),
        Config(bm, 4, 4, tile_w=16, tma=True),
        Config(2 * bm, 8, 3, tile_w=16, tma=True),
        Config(2 * bm, 8, 3, tile_w=32, tma=True),
        Config(bm // 2, 4, 4, tile_w=16, tma=True),
    ] if tma_applies(step) else []
    rows = [  # fifth step: row walking, strip widths, warps, rows a program, a pipelined loop
        Config(128, 8, 1, rows=16),
        Config(128, 4, 1, rows=32),
        Config(256, 8, 1, rows=16),
        Config(32, 4, 1, rows=16),
        Config(64, 4, 2, rows=16),
    ] if rows_applies(step) else []
    from ttball.kernels.direct import KERNELS, direct_applies

    direct = [  # eighth step: the CUDA direct kernel, every compiled tile, a block per tile
        # (s1) or persistent and pipelined (s2)
        Config(cols, 8, stages, direct=rows)
        for rows, cols in KERNELS.get((step.terms[0].cin, step.cout), ()) for stages in (2, 1)
    ] if direct_applies(step) else []
    return tma + rows + direct + [
        Config(bm, 4, 3, l1=True),                            # L1 gathers alone
        Config(bm, 4, 3, tile_w=16, l1=True),                 # + 2-D tile
        Config(bm, 4, 3, k_chunk=64),                         # taps per chunk alone
        Config(bm, 4, 2, tile_w=16, k_chunk=64),              # tile + taps, L2 gathers
        Config(bm, 4, 3, tile_w=16, k_chunk=64, l1=True),     # all three, 3 stages
        Config(bm, 4, 2, tile_w=32, k_chunk=128, l1=True),    # bigger K chunk
        Config(bm, 8, 2, tile_w=16, k_chunk=64, l1=True),     # 8 warps
        Config(bm, 4, 1, tile_w=16, k_chunk=64, l1=True),     # no pipelining: plain loads
    ]


def bench_shape(shape: dict[str, int], batch: int, height: int, width: int,
                explore: bool = False) -> list[dict]:
    from ttball.kernels.configs import conv_configs, direct_configs, rows_configs, tma_configs
    from ttball.kernels.direct import direct_missing
    from ttball.kernels.launches import ConvLaunch

    dev = torch.device("cuda")
    lo = shape["level"]
    hin, win = (height >> lo) * shape["stride"], (width >> lo) * shape["stride"]
    weight = torch.randn(shape["cout"], shape["cin"], shape["k"], shape["k"]) * 0.1
    bias = torch.randn(shape["cout"]) * 0.1
    step = Conv("y", (Term("x", weight, shape["stride"]),), bias)
    x = torch.randn(batch, hin, win, shape["cin"], device=dev, dtype=torch.float16)
    y = torch.empty(batch, height >> lo, width >> lo, shape["cout"], device=dev,
                    dtype=torch.float16)
    bufs = {"x": x, "y": y}
    direct = direct_missing(dev) is None
    launch = ConvLaunch(step, dev, tma=True, rows=True, direct=direct)
    pixels = y.shape[0] * y.shape[1] * y.shape[2]
    moved = 2 * (x.numel() + y.numel())
    flops = 2 * pixels * weight.numel()
    reps = 20 if batch == 1 else 5
    rows = []
    x_cl = x.permute(0, 3, 1, 2)  # NCHW view of NHWC memory: channels_last
    w_cl = weight.to(dev, torch.float16).contiguous(memory_format=torch.channels_last)
    b16 = bias.to(dev, torch.float16)
    with torch.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=False):
        ref = F.conv2d(x_cl, w_cl, b16, stride=shape["stride"], padding=shape["k"] // 2)
        t = time_ms(lambda: F.conv2d(x_cl, w_cl, b16, stride=shape["stride"],
                                     padding=shape["k"] // 2), reps=reps)
    rows.append({**shape, "batch": batch, "impl": "cudnn", **t})
    configs = conv_configs(step, pixels) + tma_configs(step, pixels) + rows_configs(step, pixels)
    configs += direct_configs(step, pixels) if direct else []
    if explore:
        configs += [c for c in explore_configs(step, pixels)
                    if c not in configs and (direct or not c.direct)]
    for cfg in configs:
        row = {**shape, "batch": batch, "impl": "triton", "config": vars(cfg).copy(),
               "new": is_new(cfg)}
        try:
            launch(bufs, {}, cfg)
            err = (y.permute(0, 3, 1, 2).float() - ref.float()).abs().max().item()
            t = time_ms(lambda c=cfg: launch(bufs, {}, c), reps=reps)
            sec = t["median_ms"] / 1e3
            row.update(t, max_abs_err_vs_cudnn=err, gb_s=moved / sec / 1e9,
                       tflop_s=flops / sec / 1e12)
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
        if cfg.direct and "median_ms" in row:
            rows.append(time_without_mma(shape, batch, launch, bufs, cfg, reps, moved))
    return rows


def time_without_mma(shape: dict[str, int], batch: int, launch: Any, bufs: dict, cfg: Any,
                     reps: int, moved: int) -> dict:
    """The direct kernel with its tensor-core work left out (halo copies, weights, epilogue):
    the time its memory side alone takes, beside the whole kernel's."""
    from ttball.kernels.direct import conv3x3_direct

    x, y = bufs["x"], bufs["y"]
    tile, pipelined = (cfg.direct, cfg.block_m), cfg.num_stages > 1
    t = time_ms(lambda: conv3x3_direct(y, x, launch.weights[0], launch.bias, None, tile, False,
                                       pipelined=pipelined, skip_mma=True), reps=reps)
    return {**shape, "batch": batch, "impl": "direct-no-mma", "config": vars(cfg).copy(), **t,
            "gb_s": moved / (t["median_ms"] / 1e3) / 1e9}


def stage_shapes(plan: Plan, height: int, width: int, batches: list[int], budget: Budget,
                 explore: bool = False, direct_only: bool = False) -> dict:
    from ttball.kernels.direct import KERNELS

    shapes = [s for s in conv_shapes(plan) if not direct_only or (
        s["k"] == 3 and s["stride"] == 1 and (s["cin"], s["cout"]) in KERNELS)]
    rows: list[dict] = []
    for batch in batches:
        for shape in shapes:
            if budget.left() <= 0:
                rows.append({**shape, "batch": batch, "skipped": "time budget spent"})
                continue
            try:
                rows += bench_shape(shape, batch, height, width, explore)
            except Exception as exc:  # noqa: BLE001
                rows.append({**shape, "batch": batch, "error": f"{type(exc).__name__}: {exc}"})
            print_shape(rows, shape, batch)
            print_direct(rows, shape, batch)
    return {"rows": rows}


def print_direct(rows: list[dict], shape: dict, batch: int) -> None:
    """Each direct-kernel configuration of the shape: whole and without its tensor-core work."""
    mine = [r for r in rows if r.get("batch") == batch and r.get("config", {}).get("direct")
            and "median_ms" in r and all(r.get(k) == v for k, v in shape.items())]
    alone = {(r["config"]["direct"], r["config"]["block_m"], r["config"]["num_stages"]):
             r["median_ms"] for r in mine if r["impl"] == "direct-no-mma"}
    for r in mine:
        if r["impl"] != "triton":
            continue
        c = r["config"]
        key = (c["direct"], c["block_m"], c["num_stages"])
        kind = "pipelined  " if c["num_stages"] > 1 else "block/tile "
        print(f"      direct {kind}{key[0]:>2}x{key[1]:<2} {r['median_ms']:8.4f} ms "
              f"{r['gb_s']:6.0f} GB/s  without MMA {alone.get(key, float('nan')):8.4f} ms",
              flush=True)


def print_shape(rows: list[dict], shape: dict, batch: int) -> None:
    mine = [r for r in rows if r.get("batch") == batch and all(r.get(k) == v for k, v in
                                                               shape.items())]
    cud = next((r["median_ms"] for r in mine if r.get("impl") == "cudnn"), float("nan"))
    ours = [r for r in mine if r.get("impl") == "triton" and "median_ms" in r]
    best = min(ours, key=lambda r: r["median_ms"]) if ours else None
    name = f"{shape['cin']:>3}->{shape['cout']:<3} k{shape['k']} s{shape['stride']} L{shape['level']}"
    if best is None:
        print(f"  b{batch:<3} {name}  cudnn {cud:8.4f} ms  ours: failed", flush=True)
        return
    old = [r["median_ms"] for r in ours if not r.get("new")]
    old_ms = min(old) if old else float("nan")
    print(f"  b{batch:<3} {name}  cudnn {cud:8.4f} ms  old {old_ms:8.4f} ms  best "
          f"{best['median_ms']:8.4f} ms ({cud / best['median_ms']:4.2f}x cudnn, "
          f"{old_ms / best['median_ms']:4.2f}x old)  {best['gb_s']:6.0f} GB/s "
          f"{best['tflop_s']:5.1f} TF/s  {best['config']}", flush=True)


# --- stage 2: whole network ----------------------------------------------------------------

def stage_network(model: BlurBall, height: int, width: int, batches: list[int],
                  budget: Budget) -> dict:
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    inputs = {b: torch.randn(b, 9, height, width, generator=gen).to(dev) for b in batches}
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    reference = create("eager-fp32", copy.deepcopy(model), "cuda")  # it moves its model
    refs = {b: reference(x).cpu() for b, x in inputs.items()}
    del reference
    rows = []
    for name in (*OURS_ALL, EAGER_GRAPH):
        try:
            start = time.perf_counter()
            # records=False: each of ours tunes here (its first call's time is measured)
            backend = create(name, model, "cuda", **({"records": False} if name in OURS_ALL else {}))
            build_s = time.perf_counter() - start
        except Exception as exc:  # noqa: BLE001
            rows.append({"backend": name, "error": f"{type(exc).__name__}: {exc}"})
            continue
        for b, x in inputs.items():
            row: dict[str, Any] = {"backend": name, "batch": b}
            if budget.left() <= 0:
                rows.append({**row, "skipped": "time budget spent"})
                continue
            try:
                start = time.perf_counter()
                out = backend(x)
                torch.cuda.synchronize()
                row["first_call_s"] = time.perf_counter() - start
                row["build_s"] = build_s
                row.update(agreement(out.cpu(), refs[b]))
                row["argmax_same"] = same_argmax(out.cpu(), refs[b])
                reps = max(2, 200 // (b * 4))
                t = time_ms(lambda bk=backend, xx=x: bk(xx), warmup=5, reps=reps)
                row.update(t, ms_per_window=t["median_ms"] / b,
                           windows_s=1e3 * b / t["median_ms"])
                if name in OURS_ALL:
                    ex = backend.executor  # type: ignore[attr-defined]
                    row["failures"] = list(ex.failures)
                    row["configs"] = [(n, vars(c)) for n, c in ex.chosen(tuple(x.shape))]
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {exc}"
                row["trace"] = traceback.format_exc()
            rows.append(row)
            print_network(row)
        del backend
        torch.cuda.empty_cache()
    return {"rows": rows, "cuda_graph_backend": EAGER_GRAPH}


def same_argmax(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Share of heatmaps whose argmax pixel equals eager FP32's."""
    a, b = out.flatten(2).argmax(-1), ref.flatten(2).argmax(-1)
    return (a == b).float().mean().item()


def print_network(row: dict) -> None:
    if "median_ms" not in row:
        print(f"  {row['backend']:<26} b{row.get('batch')}: {row.get('error', row)}", flush=True)
        return
    print(f"  {row['backend']:<26} b{row['batch']:<3} {row['ms_per_window']:7.3f} ms/window "
          f"{row['windows_s']:8.0f} windows/s  rel {row['rel_err']:.1e} "
          f"max|d| {row['max_abs_err']:.1e}  first call {row['first_call_s']:.1f} s", flush=True)


# --- stage 3: per step ---------------------------------------------------------------------

def stage_steps(model: BlurBall, height: int, width: int, batches: list[int],
                budget: Budget) -> dict:
    from ttball.kernels.direct import direct_missing
    from ttball.kernels.executor import TritonExecutor

    dev = torch.device("cuda")
    plan = build_plan(model)
    ex = TritonExecutor(plan, dev, tma=True, rows=True, direct=direct_missing(dev) is None)
    rows = []
    for b in batches:
        x = torch.randn(b, 9, height, width, device=dev)
        ex(x)
        bufs = ex._buffers[tuple(x.shape)]
        total = 0.0
        for i, (launch, cfg) in enumerate(zip(ex.launches, ex._configs[tuple(x.shape)])):
            if budget.left() <= 0:
                rows.append({"batch": b, "step": i, "skipped": "time budget spent"})
                break
            cost = step_cost(plan, launch.step, height, width)
            moved = b * (cost["bytes_read"] + cost["bytes_written"])
            reps = 10 if b == 1 else 3
            t = time_ms(lambda la=launch, c=cfg, bf=bufs: la(bf.tensors, bf.sums, c),
                        warmup=3, groups=3, reps=reps)
            total += t["median_ms"]
            cands = time_candidates(launch, bufs, moved, reps)
            rows.append({"batch": b, "step": i, "name": step_name(launch.step), **cost,
                         "config": vars(cfg), "new": is_new(cfg), **t,
                         "gb_s": moved / (t["median_ms"] / 1e3) / 1e9, "candidates": cands})
        mine = [r for r in rows if r.get("batch") == b and "median_ms" in r]
        if not mine:  # the first call's tuning spent the budget
            print(f"  batch {b}: no step timed (time budget spent)", flush=True)
            continue
        print_steps(mine, b, total)
        print_candidates(mine, b)
    return {"rows": rows}


def time_candidates(launch: Any, bufs: Any, moved: int, reps: int) -> list[dict]:
    """Every configuration the tuner had for this step (old and new), timed alone. A conv with
    SE sums keeps adding into them: the values drift, the timing does not depend on them."""
    out = []
    for cfg in launch.configs(bufs.tensors):
        row: dict[str, Any] = {"config": vars(cfg), "new": is_new(cfg)}
        try:
            t = time_ms(lambda la=launch, c=cfg: la(bufs.tensors, bufs.sums, c),
                        warmup=3, groups=3, reps=reps)
            row.update(t, gb_s=moved / (t["median_ms"] / 1e3) / 1e9)
        except Exception as exc:  # noqa: BLE001  (a candidate that fails is reported, not fatal)
            row["error"] = f"{type(exc).__name__}: {exc}"
        out.append(row)
    return out


def best_ms(cands: list[dict], new: bool | None) -> float:
    times = [c["median_ms"] for c in cands if "median_ms" in c and (new is None or c["new"] == new)]
    return min(times) if times else float("nan")


def print_candidates(rows: list[dict], batch: int) -> None:
    """Per step: best old and best new candidate; then the sums the tuner can reach."""
    old_sum = sum(best_ms(r["candidates"], False) for r in rows)
    all_sum = sum(best_ms(r["candidates"], None) for r in rows)
    print(f"  batch {batch}: sum of best old candidates {old_sum:.3f} ms, best of all "
          f"{all_sum:.3f} ms ({old_sum / all_sum:.2f}x); steps with new variants:", flush=True)
    for r in rows:
        new = best_ms(r["candidates"], True)
        if math.isnan(new):  # no new candidate for this step
            continue
        old = best_ms(r["candidates"], False)
        each = " ".join(f"{1e3 * c['median_ms']:.0f}" if "median_ms" in c else "err"
                        for c in r["candidates"])
        print(f"    #{r['step']:<3} {r['name']:<40} old {1e3 * old:8.1f} us  new "
              f"{1e3 * new:8.1f} us  ({old / new:4.2f}x)  all: {each}", flush=True)


def step_name(step: Any) -> str:
    if isinstance(step, Conv):
        kinds = "+".join(f"{t.cin}k{t.ksize}s{t.stride}u{t.up}" for t in step.terms)
        return f"conv {kinds}->{step.cout}" + (" se" if step.se_sum else "")
    extra = f" +{len(step.terms)} terms" if step.terms else ""
    return f"tail C{step.channels}{extra}" + (" head" if step.head else "")


def print_steps(rows: list[dict], batch: int, total: float) -> None:
    print(f"  batch {batch}: sum of steps run alone {total:.3f} ms; slowest:", flush=True)
    for r in sorted(rows, key=lambda r: -r["median_ms"])[:10]:
        print(f"    #{r['step']:<3} {r['name']:<40} {1e3 * r['median_ms']:8.1f} us "
              f"{r['gb_s']:6.0f} GB/s  {r['config']}", flush=True)


# --- main ----------------------------------------------------------------------------------

def environment() -> dict[str, Any]:
    import triton

    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
        "cudnn": torch.backends.cudnn.version(), "python": platform.python_version(),
        "command": " ".join(sys.argv),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--height", type=int, default=288)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batches", default="1,8,64", help="network stage batch sizes")
    parser.add_argument("--shape-batches", default="1,64", help="conv-shape and step batches")
    parser.add_argument("--stages", default="network,shapes,steps")
    parser.add_argument("--explore", action="store_true",
                        help="shapes stage: also time explore_configs (about 8 more compiles a "
                        "3x3 shape)")
    parser.add_argument("--direct-only", action="store_true",
                        help="shapes stage: only the shapes the CUDA direct kernel takes")
    parser.add_argument("--budget-s", type=float, default=200.0,
                        help="no new stage (or shape, or network row) after this many seconds")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_kernels.py needs a CUDA GPU")
    budget = Budget(args.budget_s)
    batches = [int(b) for b in args.batches.split(",")]
    shape_batches = [int(b) for b in args.shape_batches.split(",")]
    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    plan = build_plan(model)
    results: dict[str, Any] = {"environment": environment(),
                               "plan": plan_cost(plan, args.height, args.width),
                               "kernels_per_call": len(plan.steps) + 1}
    print(json.dumps(results, indent=1), flush=True)
    stages = {
        "network": lambda: stage_network(model, args.height, args.width, batches, budget),
        "shapes": lambda: stage_shapes(plan, args.height, args.width, shape_batches, budget,
                                       args.explore, args.direct_only),
        "steps": lambda: stage_steps(model, args.height, args.width, shape_batches, budget),
    }
    run_stages(results, stages, args.stages, budget, args.out)


if __name__ == "__main__":
    main()

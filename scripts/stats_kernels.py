"""How many GPU operations one call's candidate statistics launch, per ``TTBALL_FUSED_WINDOWS``
level (0: PyTorch ops after the fused peaks and flood; 1: the window statistics as two Triton
kernels; 2: the crops' gather and flood in one of them too).

On CUDA it replays :class:`~ttball.kernels.prepost_post.GraphedStats` (the worker's CUDA graph)
under the profiler and counts the kernels, copies and memsets of one replay. On the CPU it
counts one :func:`~ttball.kernels.prepost_post.packed_stats` call's top-level PyTorch ops that
launch something; with ``TRITON_INTERPRET=1`` in the environment the Triton path is taken there
too (each of its kernels a launch): the host side of the thirty-seventh session's estimate.

    PYTHONPATH=. python scripts/stats_kernels.py [--batch 16] [--levels 0,1,2] [--out FILE]
    TRITON_INTERPRET=1 PYTHONPATH=. python scripts/stats_kernels.py --device cpu
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from ttball.kernels import prepost_post
from ttball.serve.push_profile import GPU_CATEGORIES, chrome_trace, gpu_operations

# the host's ops that launch nothing (views, allocations, the interpreter's own bookkeeping)
NO_KERNEL = {"aten::view", "aten::unsqueeze", "aten::select", "aten::flatten", "aten::reshape",
             "aten::slice", "aten::expand", "aten::as_strided", "aten::t", "aten::permute",
             "aten::contiguous", "aten::empty", "aten::_unsafe_view", "aten::alias",
             "aten::detach", "aten::lift_fresh", "aten::result_type", "aten::to",
             "aten::set_", "aten::new_empty", "aten::empty_like", "aten::empty_strided"}


def count(device: torch.device, batch: int, height: int, width: int) -> dict[str, Any]:
    """One call's operations at the environment's level, for ``batch`` windows of logits."""
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(batch, 3, height, width, generator=g) * 3 - 6).to(device)
    thresholds = torch.full((3 * batch,), 0.5, device=device)
    if device.type == "cuda":
        stats = prepost_post.GraphedStats()
        stats(logits, thresholds)  # captured
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            stats(logits, thresholds)
            torch.cuda.synchronize()
        ops = [e["name"] for e in gpu_operations(chrome_trace(prof))]
        return {"operations": len(ops), "kinds": len(set(ops))}
    interpreted = _count_interpreted_launches()
    before = _LAUNCHES[0]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        prepost_post.packed_stats(logits, thresholds)
    ops = [e.name for e in prof.events()
           if e.cpu_parent is None and e.name.startswith("aten::") and e.name not in NO_KERNEL
           and not (interpreted and e.name == "aten::copy_")]  # the interpreter's own copies
    triton = _LAUNCHES[0] - before
    return {"operations": len(ops) + triton, "kinds": len(set(ops)) + (triton > 0),
            "triton_launches": triton}


_LAUNCHES = [0]  # interpreted Triton launches so far (_count_interpreted_launches)


def _count_interpreted_launches() -> bool:
    """Under ``TRITON_INTERPRET=1``, have each interpreted kernel launch count in
    :data:`_LAUNCHES` (once a process); False without the interpreter."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    from triton.runtime import interpreter

    run = interpreter.GridExecutor.__call__
    if getattr(run, "_ttball_counted", False):
        return True

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        _LAUNCHES[0] += 1
        return run(self, *args, **kwargs)

    counted._ttball_counted = True  # type: ignore[attr-defined]
    interpreter.GridExecutor.__call__ = counted  # type: ignore[method-assign]
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16, help="windows a call")
    parser.add_argument("--levels", default="0,1,2")
    parser.add_argument("--size", default="288x512", help="heatmap HxW")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    height, width = (int(v) for v in args.size.split("x"))
    device = torch.device(args.device)
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        prepost_post._fused = lambda t: True  # the Triton path in the interpreter
    rows = []
    for level in args.levels.split(","):
        os.environ[prepost_post.FUSED_WINDOWS_ENV] = level
        row = {"level": level, "device": device.type, **count(device, args.batch, height, width)}
        rows.append(row)
        what = "GPU operations (one replay)" if device.type == "cuda" else "host ops (one call)"
        print(f"TTBALL_FUSED_WINDOWS={level}: {row['operations']} {what}, {row['kinds']} kinds",
              flush=True)
    if args.out:
        args.out.write_text(json.dumps({"batch": args.batch, "categories": GPU_CATEGORIES,
                                        "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

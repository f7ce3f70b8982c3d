"""How many GPU operations one call's candidate statistics launch, per ``TTBALL_FUSED_WINDOWS``
level (0: PyTorch ops after the fused peaks and flood; 1: the window statistics as two Triton
kernels; 2: the crops' gather and flood in one of them too).

On CUDA it replays :class:`~ttball.kernels.prepost_post.GraphedStats` (the worker's CUDA graph)
under the profiler and counts the kernels, copies and memsets of one replay, sums their own
time, and times ``--calls`` calls alone with CUDA events (the GPU time a call costs the worker,
which the thirty-ninth session found bound by GPU time). On the CPU it
counts one :func:`~ttball.kernels.prepost_post.packed_stats` call's top-level PyTorch ops that
launch something; with ``TRITON_INTERPRET=1`` in the environment the Triton path is taken there
too (each of its kernels a launch): the host side of the thirty-seventh session's estimate.

    PYTHONPATH=. python scripts/stats_kernels.py [--batch 16] [--levels 0,1,2] [--calls 50] [--out FILE]
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


def count(device: torch.device, batch: int, height: int, width: int,
          calls: int = 50) -> dict[str, Any]:
    """One call's operations at the environment's level, for ``batch`` windows of logits
    (on CUDA also their own time in ms and ``calls`` calls' mean time, ``ms_a_call``)."""
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
        events = gpu_operations(chrome_trace(prof))
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        for _ in range(calls):
            stats(logits, thresholds)
        end.record()
        end.synchronize()
        return {"operations": len(events), "kinds": len({e["name"] for e in events}),
                "operations_ms": sum(float(e.get("dur", 0.0)) for e in events) / 1e3,
                "ms_a_call": start.elapsed_time(end) / calls}
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
    parser.add_argument("--calls", type=int, default=50, help="calls timed alone (CUDA)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    height, width = (int(v) for v in args.size.split("x"))
    device = torch.device(args.device)
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        prepost_post._fused = lambda t: True  # the Triton path in the interpreter
    rows = []
    for level in args.levels.split(","):
        os.environ[prepost_post.FUSED_WINDOWS_ENV] = level
        row = {"level": level, "device": device.type,
               **count(device, args.batch, height, width, args.calls)}
        rows.append(row)
        what = "GPU operations (one replay)" if device.type == "cuda" else "host ops (one call)"
        timed = (f"; their own time {row['operations_ms']:.3f} ms, a call alone "
                 f"{row['ms_a_call']:.3f} ms ({1e3 * row['ms_a_call'] / (3 * args.batch):.1f} us "
                 "a heatmap)" if "ms_a_call" in row else "")
        print(f"TTBALL_FUSED_WINDOWS={level}: {row['operations']} {what}, {row['kinds']} kinds"
              + timed, flush=True)
    if args.out:
        args.out.write_text(json.dumps({"batch": args.batch, "categories": GPU_CATEGORIES,
                                        "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""How close to the threshold is a window's call, and how far does FP16 storage move it?

Runs the shipped (or given) weights in FP32 on one window of a video, finds the heatmap whose
best score is closest to 0.5, and reruns the network with ttball's plan executor
(:mod:`ttball.kernels.reference`) with every step's output rounded to FP16 (what an FP16
backend stores between layers), in full and per part of the network. Prints the FP32 logit at
the borderline pixel, the FP16-emulated logits and the largest logit change over the window.

Usage: fp16_margin.py VIDEO WINDOW [--weights W]   (WINDOW: index at step 3, e.g. 24 = frames 72-74)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import torch

from ttball.frames import FrameSource, normalize
from ttball.kernels import build_plan
from ttball.kernels import reference as ref
from ttball.kernels.plan import Conv, Plan
from ttball.model import load_model
from ttball.stream import FrameStream


def window_input(video: str, index: int, config) -> torch.Tensor:  # type: ignore[no-untyped-def]
    stream, windows = FrameStream(config), []
    for frame in FrameSource(video):
        windows += stream.push(frame)
        if len(windows) > index:
            pixels = np.ascontiguousarray(windows[index].pixels[None])
            return normalize(torch.from_numpy(pixels), config)
    raise SystemExit(f"{video} has only {len(windows)} windows at step 3")


@torch.inference_mode()
def run_rounded(plan: Plan, x: torch.Tensor, rounded: Callable[[int], bool]) -> torch.Tensor:
    """The plan in FP32, with the outputs of the steps where ``rounded(i)`` rounded to FP16."""
    bufs, sums = {ref.INPUT: x.permute(0, 2, 3, 1)}, {}
    for i, step in enumerate(plan.steps):
        before = set(bufs)
        (ref.run_conv if isinstance(step, Conv) else ref.run_tail)(step, bufs, sums)
        if rounded(i):
            for name in set(bufs) - before - {ref.OUTPUT}:
                bufs[name] = bufs[name].half().float()
    return bufs[ref.OUTPUT].permute(0, 3, 1, 2)[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("video")
    p.add_argument("window", type=int)
    p.add_argument("--weights", default=None)
    args = p.parse_args()
    model = load_model(args.weights).eval()
    x = window_input(args.video, args.window, model.config)
    plan = build_plan(model)
    logits = run_rounded(plan, x, lambda i: False)
    best = torch.sigmoid(logits).amax(dim=(1, 2))
    pos = int((best - 0.5).abs().argmin())
    y, x_px = divmod(int(logits[pos].argmax()), logits.shape[2])
    print(f"window {args.window}: best score per frame {[round(v, 4) for v in best.tolist()]}")
    print(f"borderline: frame position {pos}, pixel ({x_px}, {y}) of the {logits.shape[2]}x"
          f"{logits.shape[1]} map, FP32 logit {logits[pos, y, x_px]:+.5f}")
    n = len(plan.steps)
    parts = {
        "every step FP16": lambda i: True,
        "stem/layer1/transition1 (steps 0-6)": lambda i: i <= 6,
        "first half of the steps": lambda i: i < n // 2,
        "second half of the steps": lambda i: i >= n // 2,
    }
    for name, rounded in parts.items():
        out = run_rounded(plan, x, rounded)
        print(f"{name:38s} logit {out[pos, y, x_px]:+.5f}   largest change over the window "
              f"{(out - logits).abs().max():.4f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Would 8-bit activations pass verify? Emulated on the CPU before any kernel is written.

Runs the plan executor (:mod:`ttball.kernels.reference`) in FP32 with FP16 weights and every
step's stored outputs rounded to a storage format, as a backend, and verifies it against eager
FP32 on the given clips with the default tolerances (no visibility flip, p99 ≤ 0.5 px). The
8-bit formats are scaled per tensor or per channel from the window's own maximum (``dyn``): the
most favourable static calibration could only match it, so a failure here rules the format out.

Formats: ``fp16`` (what triton-fp16 stores), ``bf16``, ``e4m3`` / ``e4m3-ch`` (FP8, per tensor /
per channel), ``e5m2``, ``int8-ch`` (symmetric per channel; activations after ReLU use the
unsigned range).

``--split-taps`` also runs each format with every 3×3 stride-1 step of few outputs and many
inputs (Cin ≥ 4·Cout: transition1's 128→16) computed as a 1×1 convolution to 9·Cout tap partials,
stored in the format, then summed shifted (the "tap split" a kernel would do to read its wide
input once instead of nine times): named ``FORMAT+split``.

``--steps 0-6`` rounds only the outputs of those plan steps to the format and the others to
FP16 (named ``FORMAT@0-6``): whether 8-bit storage passes where the bytes are largest, e.g.
the full-resolution steps before the first branch, or x5 (step 4's output) alone.

``--calibrate N`` adds ``u8-cal`` (and ``u8-cal-hH`` for each ``--headroom H``: the range H
times the calibrated maximum): 8-bit storage with **static** per-channel scales, as a
kernel's epilogue would need them (it cannot wait for the whole map's maximum): each stored
tensor's per-channel maximum over N synthetic clips of other seeds than the bundled ones
(``ttball.synth``), unsigned after ReLU, values above it clamped. With ``--steps 4``, x5
alone (transition1's 128-channel full-resolution map, the largest the network stores).

``--fp8-mma 1,5,1+5`` (fifty-ninth session) emulates FP8 *arithmetic* in those steps, the
outputs still stored as FP16: each convolution term's input rounded to e4m3 with a scale per
pixel (the maximum over its channels: a kernel can take it from the A tile it loaded, and
apply it to each tap's partial product, since a tap's rows are pixels), its weights to e4m3
with a scale per output channel; named ``fp8mma@SPEC``. ``fp8mma-win@SPEC``: the inputs with
one scale per window instead (the step before takes it by an atomic max; the kernel applies
it once, in its epilogue, where a per-pixel scale costs an FMA per tap). ``fp8mma-one@SPEC``:
not scaled at all (e4m3 spans 2⁻⁹ to 448 by itself; saturated), so the step before can store
its output in e4m3 and the kernel read half the bytes with no conversion (``--fp8-inputs``
picks among them; ``fp8mma-inputs`` and ``fp8mma-weights`` round one operand alone, to tell
which one a failure comes from). Whether Hopper's FP8 tensor cores
(twice FP16's rate) would pass verify in the compute-bound steps (step 1, the stem's 64 → 64).

Usage: activation_precision.py CLIP [CLIP ...] [--formats fp16,e4m3-ch,...] [--max-frames N]
       [--split-taps] [--steps 0-6,4] [--calibrate 2] [--fp8-mma 1,1+5]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from dataclasses import replace

import torch
from torch import Tensor

from ttball.backends import create
from ttball.kernels import build_plan
from ttball.kernels import reference as ref
from ttball.kernels.plan import Conv, Plan
from ttball.model import load_model
from ttball.verify import VerifyOptions, summary_row, verify_many


def _fp8(dtype: torch.dtype, per_channel: bool) -> Callable[[Tensor], Tensor]:
    top = torch.finfo(dtype).max

    def q(x: Tensor) -> Tensor:  # NHWC
        amax = x.abs().amax(dim=(0, 1, 2) if per_channel else None).clamp_min(1e-12)
        scale = amax / top
        return (x / scale).to(dtype).float() * scale

    return q


def e4m3_pixel(x: Tensor) -> Tensor:
    """NHWC rounded to e4m3 with a scale per pixel (its maximum over the channels)."""
    top = torch.finfo(torch.float8_e4m3fn).max
    scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / top
    return (x / scale).to(torch.float8_e4m3fn).float() * scale


def e4m3_window(x: Tensor) -> Tensor:
    """NHWC rounded to e4m3 with one scale per window (its maximum over H, W and channels):
    a scale the step before can take by an atomic max in its epilogue, which the kernel then
    applies once, in its own epilogue."""
    top = torch.finfo(torch.float8_e4m3fn).max
    scale = x.abs().amax(dim=(1, 2, 3), keepdim=True).clamp_min(1e-12) / top
    return (x / scale).to(torch.float8_e4m3fn).float() * scale


def e4m3_unscaled(x: Tensor) -> Tensor:
    """NHWC cast to e4m3 as it is (no scale: e4m3 spans 2⁻⁹ to 448 by itself), saturated at
    ±448: what the step before could write directly, so the kernel reads half the bytes."""
    top = torch.finfo(torch.float8_e4m3fn).max
    return x.clamp(-top, top).to(torch.float8_e4m3fn).float()


def e4m3_out_channel(w: Tensor) -> Tensor:
    """``(Cout, Cin, k, k)`` weights rounded to e4m3 with a scale per output channel."""
    top = torch.finfo(torch.float8_e4m3fn).max
    scale = w.abs().amax(dim=(1, 2, 3), keepdim=True).clamp_min(1e-12) / top
    return (w / scale).to(torch.float8_e4m3fn).float() * scale


def run_fp8_mma(step: Conv, bufs: dict[str, Tensor], sums: dict[str, Tensor],
                inputs: Callable[[Tensor], Tensor] = e4m3_pixel,
                weights: Callable[[Tensor], Tensor] = e4m3_out_channel) -> None:
    """``step`` with each term's input (``inputs``: per pixel, or :func:`e4m3_window`) and
    weights (``weights``: per output channel, :func:`e4m3_out_channel`) in e4m3, FP32
    accumulation; identity terms (``add``) and addends as they are."""
    terms = tuple(t if t.add else replace(t, src=f"{t.src}#fp8", weight=weights(t.weight))
                  for t in step.terms)
    local = dict(bufs)
    for t in step.terms:
        if not t.add:
            local[f"{t.src}#fp8"] = inputs(bufs[t.src])
    ref.run_conv(replace(step, terms=terms), local, sums)
    bufs[step.out] = local[step.out]


def _int8_channel(x: Tensor) -> Tensor:
    amax = x.abs().amax(dim=(0, 1, 2)).clamp_min(1e-12)
    levels = 255.0 if bool((x >= 0).all()) else 127.0  # unsigned after ReLU
    scale = amax / levels
    return torch.round(x / scale).clamp(-levels, levels) * scale


FORMATS: dict[str, Callable[[Tensor], Tensor]] = {
    "fp16": lambda x: x.half().float(),
    "bf16": lambda x: x.bfloat16().float(),
    "e4m3": _fp8(torch.float8_e4m3fn, per_channel=False),
    "e4m3-ch": _fp8(torch.float8_e4m3fn, per_channel=True),
    "e5m2": _fp8(torch.float8_e5m2, per_channel=False),
    "int8-ch": _int8_channel,
}


def splits(step: object) -> bool:
    """Whether ``--split-taps`` computes ``step`` from tap partials: one 3×3 stride-1 term
    with at least four input channels per output channel, no addend, no SE sum."""
    if not isinstance(step, Conv) or len(step.terms) != 1 or step.addends or step.se_sum:
        return False
    t = step.terms[0]
    return t.ksize == 3 and t.stride == 1 and t.up == 0 and t.cin >= 4 * step.cout


def run_split(step: Conv, bufs: dict[str, Tensor], quantize: Callable[[Tensor], Tensor]) -> None:
    """``step`` as a 1×1 convolution to ``(B, H, W, 9, Cout)`` tap partials (stored as the
    format), summed over the taps at their shifted pixels, plus bias, ReLU."""
    t = step.terms[0]
    x = bufs[t.src]  # NHWC
    w = t.weight.to(x)  # (Cout, Cin, 3, 3) → (Cin, 9 * Cout), tap-major
    w1 = w.permute(1, 2, 3, 0).reshape(t.cin, 9 * step.cout)
    partials = quantize(x @ w1).unflatten(-1, (9, step.cout))
    padded = torch.nn.functional.pad(partials, (0, 0, 0, 0, 1, 1, 1, 1))  # W and H by 1
    height, width = x.shape[1], x.shape[2]
    acc = sum(padded[:, dh:dh + height, dw:dw + width, dh * 3 + dw]
              for dh in range(3) for dw in range(3))
    acc = acc + step.bias.to(acc)
    bufs[step.out] = torch.relu(acc) if step.relu else acc


def parse_steps(spec: str) -> frozenset[int]:
    """``"0-6"`` → {0, …, 6}; ``"4"`` → {4}; ``"1-2+5"`` → {1, 2, 5}."""
    chosen: set[int] = set()
    for part in spec.split("+"):
        first, dash, last = part.partition("-")
        try:
            lo, hi = int(first), int(last if dash else first)
        except ValueError:
            raise SystemExit(f"--steps: {spec!r} is not like 0-6, 4 or 1-2+5") from None
        if lo > hi or lo < 0:
            raise SystemExit(f"--steps: {part!r} is not a range of step indices")
        chosen.update(range(lo, hi + 1))
    return frozenset(chosen)


class Calibrated:
    """Static per-channel 8-bit storage: ``observe`` records each buffer's per-channel maximum
    (absolute, and whether it was ever negative); then ``quantize(name, x)`` rounds to 255
    levels (never negative: after ReLU) or ±127, clamped at the recorded maximum."""

    def __init__(self) -> None:
        self.amax: dict[str, Tensor] = {}
        self.signed: dict[str, bool] = {}

    def observe(self, name: str, x: Tensor) -> None:
        amax = x.abs().amax(dim=(0, 1, 2))
        self.amax[name] = torch.maximum(self.amax[name], amax) if name in self.amax else amax
        self.signed[name] = self.signed.get(name, False) or bool((x < 0).any())

    def quantize(self, name: str, x: Tensor, headroom: float = 1.0) -> Tensor:
        """``headroom``: the range is that many times the recorded maximum (coarser steps,
        less clamping)."""
        levels = 127.0 if self.signed[name] else 255.0
        scale = headroom * self.amax[name].clamp_min(1e-12) / levels
        low = -levels if self.signed[name] else 0.0
        return torch.round(x / scale).clamp(low, levels) * scale


class Emulated:
    """A backend: the plan with FP16 weights, FP32 arithmetic, outputs stored as ``fmt``
    (``fmt+split``: and the steps :func:`splits` selects computed by :func:`run_split`;
    ``fmt@SPEC``: only the outputs of the steps :func:`parse_steps` reads from SPEC, the
    others as FP16)."""

    def __init__(self, plan: Plan, fmt: str, calibrated: Calibrated | None = None) -> None:
        """``calibrated``: the scales of ``u8-cal``; while observing (``observe=True`` below)
        it records them instead."""
        fmt_split, _, spec = fmt.partition("@")
        base, _, split = fmt_split.partition("+")
        self.calibrated, self.observe = calibrated, False
        self.headroom = 1.0
        fp16 = FORMATS["fp16"]
        self.fp8_mma = {"fp8mma": (e4m3_pixel, e4m3_out_channel),
                        "fp8mma-win": (e4m3_window, e4m3_out_channel),
                        "fp8mma-one": (e4m3_unscaled, e4m3_out_channel),
                        # one operand alone in e4m3 (a diagnosis: which one a failure is)
                        "fp8mma-inputs": (e4m3_pixel, fp16),
                        "fp8mma-weights": (fp16, e4m3_out_channel)}.get(base)
        if self.fp8_mma:  # FP8 arithmetic in the chosen steps, every output stored as FP16
            if not spec:
                raise SystemExit(f"{base} needs its steps: {base}@1")
            base = "fp16"
        if base.startswith("u8-cal"):
            if calibrated is None:
                raise SystemExit("u8-cal needs --calibrate N")
            self.quantize = None
            self.headroom = float(base.partition("-h")[2] or 1.0)
        else:
            self.quantize = FORMATS[base]
        self.plan, self.split = plan, split == "split"
        self.steps = parse_steps(spec) if spec else None
        self.name, self.device, self.warmed = f"plan-{fmt}", torch.device("cpu"), set()

    def _store(self, name: str, x: Tensor, chosen: bool) -> Tensor:
        if self.observe and self.calibrated is not None:
            self.calibrated.observe(name, x)
        if not chosen:
            return FORMATS["fp16"](x)
        if self.quantize is None:
            assert self.calibrated is not None
            return self.calibrated.quantize(name, x, self.headroom)
        return self.quantize(x)

    @torch.inference_mode()
    def __call__(self, batch: Tensor) -> Tensor:
        bufs, sums = {ref.INPUT: batch.float().permute(0, 2, 3, 1)}, {}
        for i, step in enumerate(self.plan.steps):
            before = set(bufs)
            chosen = self.steps is None or i in self.steps
            if self.fp8_mma and chosen and isinstance(step, Conv):
                run_fp8_mma(step, bufs, sums, *self.fp8_mma)
            elif self.split and splits(step):
                assert self.quantize is not None, "--split-taps with u8-cal is not emulated"
                run_split(step, bufs, self.quantize)
            else:
                (ref.run_conv if isinstance(step, Conv) else ref.run_tail)(step, bufs, sums)
            chosen = chosen and self.fp8_mma is None
            for name in set(bufs) - before - {ref.OUTPUT}:
                bufs[name] = self._store(name, bufs[name], chosen)
        return bufs[ref.OUTPUT].permute(0, 3, 1, 2).contiguous()

    def warmup(self, batch_sizes: Iterable[int], height: int, width: int) -> dict[int, float]:
        return {b: 0.0 for b in batch_sizes}


def _half_weights(plan: Plan) -> None:
    for step in plan.steps:
        for term in step.terms:
            term.weight.copy_(term.weight.half().float())


def calibrate(plan: Plan, clips: int, max_frames: int | None) -> Calibrated:
    """Every stored tensor's per-channel maximum over ``clips`` synthetic clips (seeds the
    bundled clips do not use; ``max_frames`` frames each), the plan run with FP16 storage."""
    import tempfile
    from pathlib import Path

    from ttball.pipeline import track
    from ttball.synth import ClipConfig, clip_seed, plan_clip, write_clip
    from ttball.verify._inputs import BUNDLED_SIZE

    calibrated = Calibrated()
    recorder = Emulated(plan, "fp16", calibrated)
    recorder.observe = True
    config = ClipConfig(size=BUNDLED_SIZE, frames=max_frames or 48)
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(clips):
            name = f"calib_{k:04d}"
            write_clip(plan_clip(clip_seed(CALIBRATION_SEED, k), config), Path(tmp), name)
            track(Path(tmp) / f"{name}.mp4", backend=recorder, device="cpu")
    print(f"calibrated {len(calibrated.amax)} tensors on {clips} synthetic clips "
          f"(seed {CALIBRATION_SEED})")
    return calibrated


CALIBRATION_SEED = 1234  # not ttball.verify's BUNDLED_SEED


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("clips", nargs="+")
    p.add_argument("--formats", default="fp16,bf16,e4m3,e4m3-ch,e5m2,int8-ch")
    p.add_argument("--max-frames", type=int, default=None)
    p.add_argument("--weights", default=None)
    p.add_argument("--split-taps", action="store_true",
                   help="also each format with the tap split (FORMAT+split)")
    p.add_argument("--calibrate", type=int, default=0, metavar="N",
                   help="add u8-cal: static per-channel scales from N synthetic clips of other "
                        "seeds than the bundled ones")
    p.add_argument("--headroom", default="1",
                   help="with --calibrate: comma-separated range factors over the calibrated "
                        "maximum, one u8-cal format each (u8-cal-h2: twice the maximum)")
    p.add_argument("--fp8-mma", default=None, metavar="SETS",
                   help="comma-separated step sets: FP8 arithmetic in those steps (fp8mma@SET: "
                        "inputs scaled per pixel; fp8mma-win@SET: per window; fp8mma-one@SET: "
                        "not scaled; fp8mma-inputs / fp8mma-weights@SET: that operand alone)")
    p.add_argument("--fp8-inputs", default="fp8mma,fp8mma-win,fp8mma-one",
                   help="with --fp8-mma: which input scalings to verify")
    p.add_argument("--steps", default=None,
                   help="comma-separated step sets (0-6, 4, 1-2+5): each format also with only "
                        "those steps' outputs in it, the rest FP16 (FORMAT@SET)")
    args = p.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model = load_model(args.weights).eval()
    plan = build_plan(model)
    _half_weights(plan)
    reference = create("eager-fp32", model, "cpu")
    formats = [f for f in args.formats.split(",") if f]
    calibrated = None
    if args.calibrate > 0:
        calibrated = calibrate(plan, args.calibrate, args.max_frames)
        formats += [f"u8-cal-h{h}" if float(h) != 1 else "u8-cal"
                    for h in args.headroom.split(",")]
    if args.split_taps:
        print("tap split: steps " + ", ".join(
            str(i) for i, step in enumerate(plan.steps) if splits(step)))
        formats += [f"{f}+split" for f in formats]
    if args.steps:
        for spec in args.steps.split(","):
            parse_steps(spec)  # a bad set fails before minutes of verifying
        formats = [f"{f}@{spec}" for f in formats for spec in args.steps.split(",")]
    if args.fp8_mma:
        for spec in args.fp8_mma.split(","):
            parse_steps(spec)
        formats += [f"{kind}@{spec}" for kind in args.fp8_inputs.split(",")
                    for spec in args.fp8_mma.split(",")]
    if not formats:
        raise SystemExit("nothing to verify: give --formats or --fp8-mma")
    candidates = {f"plan-{f}": Emulated(plan, f, calibrated) for f in formats}
    reports = verify_many(
        candidates, reference, args.clips, config=model.config,
        options=VerifyOptions(max_frames=args.max_frames),
    )
    rows = {name: summary_row(report) for name, report in reports.items()}
    for name, row in rows.items():
        print(f"{name:14s} passed={row['passed']!s:5s} flips={row['flips']} "
              f"p99={row['p99_px']:.3g}px max={row['max_px']:.3g}px "
              f"peak_moved={row['peak_moved']} logit_rel={row['logit_rel']:.2e}")
    print(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()

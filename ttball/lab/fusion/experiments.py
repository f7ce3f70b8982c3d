"""The timed experiments, in this process: BN folding, the elementwise chain, per-call overhead.

The chain's variants also give experiment 4 (bytes moved): :data:`PASSES`, :data:`FRESH_ARRAYS`
and :func:`bytes_moved` count what each moves and allocates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import cache

import torch
from torch import nn

from ttball.lab.fusion.timing import MIN_SAMPLE_S, Timing, timer
from ttball.passes.fold_bn import fold_conv_bn

# Kernel passes over the array (each reads it once and writes it once) and fresh arrays
# allocated per call of each variant of the chain.
PASSES = {"eager": 4, "inplace": 4, "compiled": 1}
FRESH_ARRAYS = {"eager": 4, "inplace": 1, "compiled": 1}


@dataclass(frozen=True)
class FusionSizes:
    """Problem sizes; the defaults are the seed's. The conv input is float32 [1, conv_in, height,
    width]; the chain runs on float32 [chain_numel]; the addition on add_calls × add_slice."""

    conv_in: int = 32
    conv_out: int = 64
    kernel: int = 3
    height: int = 144
    width: int = 256
    chain_numel: int = 2**24
    add_calls: int = 1000
    add_slice: int = 1024

    def __post_init__(self) -> None:
        bad = [k for k, v in asdict(self).items() if not (isinstance(v, int) and v > 0)]
        if bad:
            raise ValueError(f"sizes must be positive integers: {', '.join(bad)}")

    def scaled(self, factor: float) -> FusionSizes:
        """Element counts times ``factor`` (conv sides times its square root); channels kept."""
        side = math.sqrt(factor)
        return replace(
            self,
            height=max(8, round(self.height * side)),
            width=max(8, round(self.width * side)),
            chain_numel=max(1024, round(self.chain_numel * factor)),
            add_calls=max(10, round(self.add_calls * factor)),
        )


SEED_SIZES = FusionSizes()  # the seed article's sizes: the defaults


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# ---------------------------------------------------------------- 1. BN folding


@dataclass(frozen=True)
class FoldResult:
    max_abs_diff: float
    max_rel_diff: float  # max |diff| / max |conv+BN output|
    unfused: Timing
    folded: Timing
    bn_alone: Timing  # the BatchNorm on the conv's output: roughly what folding saves


def make_conv_bn(sizes: FusionSizes, device: torch.device, seed: int = 0) -> nn.Sequential:
    """Conv2d(conv_in → conv_out, kernel × kernel, same padding, no bias) + BatchNorm2d in eval
    mode, with random running statistics and affine parameters so that folding has work to do.
    Running variances lie in [0.05, 2.05], small enough that a fold forgetting ε is caught."""
    g = torch.Generator().manual_seed(seed)
    c = sizes.conv_out
    conv = nn.Conv2d(sizes.conv_in, c, sizes.kernel, padding=sizes.kernel // 2, bias=False)
    bn = nn.BatchNorm2d(c)
    assert bn.running_mean is not None and bn.running_var is not None  # tracked by default
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * 0.1)
        bn.running_mean.copy_(torch.randn(c, generator=g))
        bn.running_var.copy_(torch.rand(c, generator=g) * 2 + 0.05)
        bn.weight.copy_(torch.rand(c, generator=g) + 0.5)
        bn.bias.copy_(torch.randn(c, generator=g))
    return nn.Sequential(conv, bn).eval().to(device)


def fold_experiment(
    sizes: FusionSizes, device: torch.device, repeats: int, min_sample_s: float = MIN_SAMPLE_S
) -> FoldResult:
    model = make_conv_bn(sizes, device)
    folded = fold_conv_bn(model[0], model[1])  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, sizes.conv_in, sizes.height, sizes.width, generator=g).to(device)
    ref, out, conv_out = model(x), folded(x), model[0](x)
    diff = _max_diff(ref, out)
    timed = timer(device, repeats, min_sample_s)
    return FoldResult(
        max_abs_diff=diff,
        max_rel_diff=diff / max(ref.abs().max().item(), 1e-30),
        unfused=timed(lambda: model(x)),
        folded=timed(lambda: folded(x)),
        bn_alone=timed(lambda: model[1](conv_out)),
    )


# ---------------------------------------------------------------- 2. elementwise chain


def chain(x: torch.Tensor) -> torch.Tensor:
    """``relu(x·1.5 + 0.5)·0.9`` as eager runs it: four kernels, four fresh arrays."""
    return torch.relu(x * 1.5 + 0.5) * 0.9


def chain_inplace(x: torch.Tensor) -> torch.Tensor:
    """The same chain by hand: one fresh array, then three in-place passes over it."""
    y = x * 1.5
    y.add_(0.5)
    y.relu_()
    return y.mul_(0.9)


def compile_chain() -> Callable[[torch.Tensor], torch.Tensor]:
    """``torch.compile(chain)``, fresh; it compiles at its first call."""
    return torch.compile(chain, dynamic=False)  # type: ignore[return-value]


@cache
def compiled_chain() -> Callable[[torch.Tensor], torch.Tensor]:
    """:func:`compile_chain`, built once per process so that repeated runs reuse it."""
    return compile_chain()


def chain_input(numel: int, device: torch.device) -> torch.Tensor:
    """float32 [numel], standard normal, the same on every run."""
    return torch.randn(numel, generator=torch.Generator().manual_seed(2)).to(device)


@dataclass(frozen=True)
class ChainResult:
    numel: int
    itemsize: int
    eager: Timing
    inplace: Timing
    compiled: Timing
    compiled_max_abs_diff: float  # against eager
    inplace_max_abs_diff: float
    fresh_fill: Timing  # torch.empty_like(x).fill_(1): allocate, first-touch, write
    reused_fill: Timing  # buffer.fill_(1) on an array allocated once: write only

    @property
    def fresh_array_ms(self) -> float:
        """Cost of allocating one array of this size and touching its pages the first time."""
        return max(0.0, self.fresh_fill.median_ms - self.reused_fill.median_ms)


def chain_experiment(
    numel: int, device: torch.device, repeats: int, min_sample_s: float = MIN_SAMPLE_S
) -> ChainResult:
    x = chain_input(numel, device)
    fused = compiled_chain()
    ref = chain(x)
    buffer = torch.empty_like(x)
    timed = timer(device, repeats, min_sample_s)
    return ChainResult(
        numel=numel,
        itemsize=x.element_size(),
        compiled_max_abs_diff=_max_diff(fused(x), ref),
        inplace_max_abs_diff=_max_diff(chain_inplace(x), ref),
        eager=timed(lambda: chain(x)),
        inplace=timed(lambda: chain_inplace(x)),
        compiled=timed(lambda: fused(x)),
        fresh_fill=timed(lambda: torch.empty_like(x).fill_(1.0)),
        reused_fill=timed(lambda: buffer.fill_(1.0)),
    )


def bytes_moved(variant: str, numel: int, itemsize: int = 4) -> int:
    """Bytes read plus written by one call of a chain variant: each pass reads and writes once."""
    return PASSES[variant] * 2 * numel * itemsize


# ---------------------------------------------------------------- 3. per-call overhead


def per_call_us(one_call_ms: float, split_ms: float, calls: int) -> float:
    """Microseconds each of ``calls`` calls adds over one call doing the same work."""
    return (split_ms - one_call_ms) * 1e3 / calls


@dataclass(frozen=True)
class OverheadResult:
    calls: int
    slice_len: int
    one_call: Timing  # torch.add(a, b, out=out) over calls × slice_len elements
    split: Timing  # the same additions as `calls` calls over precomputed slice views

    @property
    def per_call_us(self) -> float:
        return per_call_us(self.one_call.median_ms, self.split.median_ms, self.calls)


def overhead_experiment(
    calls: int, slice_len: int, device: torch.device, repeats: int,
    min_sample_s: float = MIN_SAMPLE_S,
) -> OverheadResult:
    n = calls * slice_len
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(n, generator=g).to(device) for _ in range(2))
    out = torch.empty_like(a)
    views = [(a[i:i + slice_len], b[i:i + slice_len], out[i:i + slice_len])
             for i in range(0, n, slice_len)]

    def split() -> None:
        for x, y, o in views:
            torch.add(x, y, out=o)

    timed = timer(device, repeats, min_sample_s)
    return OverheadResult(
        calls=calls,
        slice_len=slice_len,
        one_call=timed(lambda: torch.add(a, b, out=out)),
        split=timed(split),
    )

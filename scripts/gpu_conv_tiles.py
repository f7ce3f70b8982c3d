"""One 3×3 convolution of the CUDA direct kernels (``ttball.kernels.direct``) alone, at the
network's full resolution, in each of the given tiles (issue 9): times each (10 launches after
3), then launches each once between ``cudaProfilerStart`` and ``Stop`` for Nsight Compute.

    ncu --profile-from-start off --clock-control none --set full --export tiles \
        python3 scripts/gpu_conv_tiles.py --channels 128,16 --tiles 16x16,3x64x3,2x64x2

A tile is ``ROWSxCOLS`` (the mma.sync kernel) or ``ROWSx64xWARPGROUPS`` (the wgmma kernel, one
of ``WGMMA``; ``ROWSx128xWARPGROUPS`` for 64 → 64 with the pixels as N), that with a ``t``
after it with the halo copied by TMA (one of ``WGMMA_TMA``) or an ``r`` with A from registers
(one of ``WGMMA_RS``);
every tile runs on a persistent grid (``pipelined``). Each tile's output is compared with
PyTorch's convolution (cuDNN, FP16, channels_last), which is timed beside the tiles, so a wrong
kernel is not timed unnoticed.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_tile(text: str) -> tuple[tuple[int, int], int, str]:
    """``"16x16"`` → ((16, 16), 1, ""); ``"3x64x3"`` → ((3, 64), 3, ""); ``"16x64x2t"`` →
    ((16, 64), 2, "t") (the TMA halo); ``"16x64x1r"`` → ((16, 64), 1, "r") (A from
    registers)."""
    variant = text[-1] if text[-1] in "tr" else ""
    parts = [int(p) for p in text.removesuffix(variant).split("x")]
    if len(parts) not in (2, 3) or (variant and len(parts) != 3):
        raise ValueError(f"tile {text!r}: ROWSxCOLS or ROWSx64xWARPGROUPS, that with a t or r")
    return (parts[0], parts[1]), parts[2] if len(parts) == 3 else 1, variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--channels", default="128,16", help="CIN,COUT")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--height", type=int, default=288)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--tiles", default="16x16,3x64x3,2x64x2")
    args = parser.parse_args()
    # (imported here: the kernels' modules import triton, which a test of parse_tile must not,
    # or the kernel tests collected after it find triton compiled instead of interpreted)
    from ttball.kernels.conv import pack_weight
    from ttball.kernels.direct import conv3x3_direct, direct_missing

    dev = torch.device("cuda")
    if direct_missing(dev):
        sys.exit(f"gpu_conv_tiles.py: {direct_missing(dev)}")
    cin, cout = (int(c) for c in args.channels.split(","))
    tiles = [parse_tile(t) for t in args.tiles.split(",")]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, args.height, args.width, cin, generator=g).half().to(dev)
    weight = torch.randn(cout, cin, 3, 3, generator=g) / (3 * cin ** 0.5)
    w = pack_weight(weight, dev)
    bias = torch.randn(cout, generator=g).to(dev)
    x_nchw = x.permute(0, 3, 1, 2)  # channels_last memory, as the network's tensors
    weight_cl = weight.half().to(dev).contiguous(memory_format=torch.channels_last)

    def reference() -> torch.Tensor:
        return torch.relu(torch.nn.functional.conv2d(x_nchw, weight_cl, bias.half(), padding=1))

    def timed(fn) -> float:
        """Mean microseconds of 10 launches after 3."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(3):
            fn()
        start.record()
        for _ in range(10):
            fn()
        end.record()
        torch.cuda.synchronize()
        return 1e3 * start.elapsed_time(end) / 10

    expected = reference().permute(0, 2, 3, 1).float()
    print(f"{cin}->{cout} cuDNN (torch FP16 channels_last): {timed(reference):.1f} us",
          file=sys.stderr, flush=True)
    outs = [torch.empty(*x.shape[:3], cout, dtype=torch.half, device=dev) for _ in tiles]

    def run(k: int) -> None:
        tile, groups, variant = tiles[k]
        conv3x3_direct(outs[k], x, w, bias, None, tile, relu=True, pipelined=True,
                       warpgroups=groups, tma=variant == "t", rs=variant == "r")

    for k, text in enumerate(args.tiles.split(",")):
        micros = timed(functools.partial(run, k))
        diff = (outs[k].float() - expected).abs().max().item()
        print(f"{cin}->{cout} tile {text}: {micros:.1f} us, max |out - cuDNN's| {diff:.3g}",
              file=sys.stderr, flush=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for k in range(len(tiles)):
        run(k)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()

"""The BlurBall network: an HRNet-style ball detector over a 3-frame window.

Written from ``shared/spec/blurball.md``. Module names follow the published checkpoints
(``blurball_state_dict.tsv``) so that their state dicts load unchanged.

Input ``(B, 9, H, W)`` float: three normalised RGB frames, oldest first, stacked on channels.
Output ``{0: logits}`` with logits ``(B, 3, H, W)``: one heatmap per input frame, before sigmoid.
H and W must be multiples of 8 (the lowest branch runs at stride 8); the published size is 288×512.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import torch
from torch import Tensor, nn

from ttball.model.config import WeightsConfig

BN_MOMENTUM = 0.1
BN_EPS = 1e-5


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, bias=False)


class SqueezeExcitation(nn.Module):
    """Global average pool → Linear C→C/16 → ReLU → Linear C/16→C → sigmoid → scale channels."""

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        hidden = max(channels // reduction, 1)
        self.fc = nn.Sequential(
            nn.Linear(channels, hidden, bias=False),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, channels, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, x: Tensor) -> Tensor:
        scale = self.fc(x.mean(dim=(2, 3)))
        return x * scale[:, :, None, None]


class BasicBlock(nn.Module):
    """conv3×3 → BN → ReLU → conv3×3 → BN → SE → + input → ReLU (channels unchanged)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = _conv3x3(channels, channels)
        self.bn1 = _bn(channels)
        self.conv2 = _conv3x3(channels, channels)
        self.bn2 = _bn(channels)
        self.se = SqueezeExcitation(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.se(self.bn2(self.conv2(out)))
        return self.relu(out + x)


class Bottleneck(nn.Module):
    """1×1 → 3×3 → 1×1 (×4 expansion) with a projected residual; no squeeze-excitation."""

    def __init__(self, cin: int, width: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1 = _conv1x1(cin, width)
        self.bn1 = _bn(width)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = _bn(width)
        self.conv3 = _conv1x1(width, cout)
        self.bn3 = _bn(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = nn.Sequential(_conv1x1(cin, cout), _bn(cout))

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.downsample(x))


def _conv_bn_relu(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(_conv3x3(cin, cout, stride), _bn(cout), nn.ReLU(inplace=True))


def _fuse_path(widths: list[int], j: int, i: int) -> nn.Module:
    """The path that brings branch j's features to branch i's resolution and width."""
    if j == i:
        return nn.Identity()
    if j > i:
        return nn.Sequential(
            _conv1x1(widths[j], widths[i]),
            _bn(widths[i]),
            nn.Upsample(scale_factor=2 ** (j - i), mode="nearest"),
        )
    steps: list[nn.Module] = []
    for k in range(i - j):
        if k == i - j - 1:
            steps.append(nn.Sequential(_conv3x3(widths[j], widths[i], 2), _bn(widths[i])))
        else:
            steps.append(_conv_bn_relu(widths[j], widths[j], 2))
    return nn.Sequential(*steps)


class HighResolutionModule(nn.Module):
    """Parallel branches of two basic blocks each, then every branch fused into every output."""

    def __init__(self, widths: list[int], blocks: int = 2) -> None:
        super().__init__()
        self.branches = nn.ModuleList(
            nn.Sequential(*(BasicBlock(w) for _ in range(blocks))) for w in widths
        )
        n = len(widths)
        self.fuse_layers = nn.ModuleList(
            nn.ModuleList(_fuse_path(widths, j, i) for j in range(n)) for i in range(n)
        )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, xs: list[Tensor]) -> list[Tensor]:
        xs = [branch(x) for branch, x in zip(self.branches, xs)]
        outs = []
        for paths in cast("Iterable[nn.ModuleList]", self.fuse_layers):
            total = paths[0](xs[0])
            for path, x in zip(paths[1:], xs[1:]):
                total = total + path(x)
            outs.append(self.relu(total))
        return outs


class BlurBall(nn.Module):
    """The BlurBall detector. ``forward(x (B, 9, H, W)) -> {0: logits (B, 3, H, W)}``."""

    widths = (16, 32, 64, 128)

    def __init__(self, in_frames: int = 3, out_frames: int = 3) -> None:
        super().__init__()
        w = list(self.widths)
        self.config = WeightsConfig()  # replaced by load_model() with the checkpoint's own
        self.conv1 = _conv3x3(3 * in_frames, 64)
        self.bn1 = _bn(64)
        self.conv2 = _conv3x3(64, 64)
        self.bn2 = _bn(64)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(Bottleneck(64, 32))
        self.transition1 = nn.ModuleList(
            [_conv_bn_relu(128, w[0], 1), nn.Sequential(_conv_bn_relu(128, w[1], 2))]
        )
        self.stage2 = nn.Sequential(HighResolutionModule(w[:2]))
        self.transition2 = self._transition(w[1], w[2], 3)
        self.stage3 = nn.Sequential(HighResolutionModule(w[:3]))
        self.transition3 = self._transition(w[2], w[3], 4)
        self.stage4 = nn.Sequential(HighResolutionModule(w[:4]))
        self.final_layers = nn.ModuleList([nn.Conv2d(w[0], out_frames, 1, bias=True)])

    @staticmethod
    def _transition(cin: int, cout: int, branches: int) -> nn.ModuleList:
        """Existing branches pass through; the new one is a stride-2 conv from the lowest."""
        paths: list[nn.Module] = [nn.Identity() for _ in range(branches - 1)]
        paths.append(nn.Sequential(_conv_bn_relu(cin, cout, 2)))
        return nn.ModuleList(paths)

    def forward(self, x: Tensor) -> dict[int, Tensor]:
        if not _traced(x):
            check_input_size(*x.shape[-2:])  # else a tensor size mismatch deep in a fuse layer
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(self.bn2(self.conv2(x)))
        x = self.layer1(x)
        xs = [t(x) for t in self.transition1]
        xs = self.stage2(xs)
        xs = xs + [self.transition2[-1](xs[-1])]
        xs = self.stage3(xs)
        xs = xs + [self.transition3[-1](xs[-1])]
        xs = self.stage4(xs)
        return {0: self.final_layers[0](xs[0])}


def _traced(x: Tensor) -> bool:
    """Whether ``x`` is being traced into a graph whose shapes are not numbers (torch.fx's
    proxies; TorchScript's and the ONNX exporter's tensors): the caller checks the size there."""
    return isinstance(x, torch.fx.Proxy) or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def check_input_size(height: int, width: int) -> None:
    """``ValueError`` unless ``height`` x ``width`` is an input the network takes."""
    if height <= 0 or width <= 0 or height % 8 or width % 8:
        raise ValueError(f"input size {height}x{width}: height and width must be positive "
                         "multiples of 8 (the network's lowest branch runs at stride 8)")


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def randomize_batchnorm(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm non-trivial statistics, so tests and benches don't run on identities."""
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            assert m.weight is not None and m.bias is not None, "BlurBall's BatchNorms are affine"
            assert m.running_mean is not None and m.running_var is not None
            m.weight.copy_(1 + 0.1 * torch.randn(n, generator=gen))
            m.bias.copy_(0.1 * torch.randn(n, generator=gen))
            m.running_mean.copy_(0.1 * torch.randn(n, generator=gen))
            m.running_var.copy_(1 + 0.2 * torch.rand(n, generator=gen))
    return model

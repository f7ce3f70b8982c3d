"""BlurBall as a flat list of fused steps: what the Triton backend launches, one kernel a step.

:func:`build_plan` walks a BlurBall (folding its BatchNorms with :func:`ttball.passes.fold_batchnorm`
unless that was done) and emits two kinds of step:

- :class:`Conv`: ``out = act(sum_k term_k(src_k) + bias + addends)``, optionally accumulating
  ``sum_hw(out before act)`` per (batch, channel) for squeeze-excitation. A term is a 3×3 (stride
  1 or 2, pad 1) or 1×1 convolution; a 1×1 term may read a source ``2**up`` times coarser at
  pixel ``(h >> up, w >> up)``, which equals convolving and then nearest-upsampling.
- :class:`SqueezeTail`: the end of a BasicBlock, ``t = relu(y * se(mean_hw y) + residual)``;
  optionally stores ``t``, optionally continues with an HRNet fuse output
  ``relu(t + sum_k term_k + bias)`` and optionally with the 1×1 head on that.

How BlurBall maps onto them (67 steps; :mod:`ttball.kernels.executor` runs one kernel each):

- Bottleneck: ``conv3(h) + downsample(x)`` is one Conv with two 1×1 terms (the 128-channel
  full-resolution downsample output is never written).
- BasicBlock: conv1 (ReLU), conv2 (+SE sums), SqueezeTail: three steps.
- Fuse output i: the paths from coarser branches j > i are 1×1 terms with ``up = j - i`` of the
  step that produces output i (no upsampled intermediates); the last stride-2 conv of each path
  from a finer branch is a term too; the identity is an addend. Output 0 has no conv at its
  resolution, so it is produced by branch 0's last SqueezeTail.
- Only outputs used later are built: stage 4 computes output 0 alone, with the head fused.
- ``project_terms``: each upsampled 1×1 term of branch 0's last SqueezeTail (16 output
  channels from 32, 64 or 128) is computed at its source's resolution, and that tail adds the
  16-channel map (a term with ``add``: identity weight). A 1×1 convolution commutes with
  nearest upsampling, so this is the same sum; it reads each coarse pixel's channels once
  instead of once per fine pixel (4-64 times) and rounds the term to FP16 once more.
  ``"tail"`` (the default) computes the map in the SqueezeTail that produces the source (its
  ``proj``), ``"conv"`` in a 1×1 Conv step of its own after it (73 steps instead of 67),
  ``"off"`` not at all (the terms at full resolution, as the module computes them).

Buffers are NHWC tensors ``(B, H >> level, W >> level, channels)``; ``input`` is the network's
``(B, 9, H, W)`` batch seen as NHWC, ``logits`` the ``(B, 3, H, W)`` output seen as NHWC.
Weights stay float32 in the plan (canonical ``(Cout, Cin, k, k)``); executors convert them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, fx, nn

INPUT, OUTPUT = "input", "logits"
LEVELS = 4  # the coarsest branch runs at stride 2**(LEVELS - 1): H and W must be multiples of 8


@dataclass(frozen=True)
class Buffer:
    """An NHWC activation ``(B, H >> level, W >> level, channels)``."""

    name: str
    channels: int
    level: int


@dataclass(frozen=True, eq=False)
class Term:
    """``weight (Cout, Cin, k, k)`` float32 applied to buffer ``src`` (k = 3: pad 1)."""

    src: str
    weight: Tensor
    stride: int = 1
    up: int = 0  # 1×1 only: ``src`` is 2**up coarser than the output, read at (h >> up, w >> up)
    add: bool = False  # ``src`` added as it is: ``weight`` is the identity (no FLOPs counted)

    @property
    def ksize(self) -> int:
        return self.weight.shape[-1]

    @property
    def cin(self) -> int:
        return self.weight.shape[1]


@dataclass(frozen=True, eq=False)
class Conv:
    """``out = act(sum(terms) + bias + sum(up(addend)))``; ``se_sum`` gets ``sum_hw`` before act."""

    out: str
    terms: tuple[Term, ...]
    bias: Tensor
    addends: tuple[tuple[str, int], ...] = ()  # (buffer, up): read at (h >> up, w >> up)
    relu: bool = False
    se_sum: str | None = None

    @property
    def cout(self) -> int:
        return self.terms[0].weight.shape[0]


@dataclass(frozen=True, eq=False)
class Head:
    """``out = weight (Cout, C) @ x + bias``: the 1×1 output layer (written as float32), or
    a SqueezeTail's projection (``proj``, FP16)."""

    out: str
    weight: Tensor
    bias: Tensor


@dataclass(frozen=True, eq=False)
class SqueezeTail:
    """``t = relu(y * sigmoid(fc2 @ relu(fc1 @ (se_sum / HW))) + residual)`` stored to ``out``
    (if set); then, with ``terms``, ``f = relu(t + sum(terms) + bias)`` stored to ``fused`` or
    passed through ``head``; or (no terms) ``proj.weight @ t`` stored to ``proj.out``.
    ``fc1 (C/16, C)``, ``fc2 (C, C/16)``: the SE's bias-free Linears."""

    y: str
    residual: str
    se_sum: str
    fc1: Tensor
    fc2: Tensor
    out: str | None = None
    terms: tuple[Term, ...] = ()
    bias: Tensor | None = None
    fused: str | None = None
    head: Head | None = None
    proj: Head | None = None  # ``t`` through a 1×1 (no bias), stored FP16 at t's resolution

    @property
    def channels(self) -> int:
        return self.fc2.shape[0]


Step = Conv | SqueezeTail


@dataclass
class Plan:
    """Steps in execution order, the buffers they use, and the SE sum buffers (name → C)."""

    steps: list[Step] = field(default_factory=list)
    buffers: dict[str, Buffer] = field(default_factory=dict)
    sums: dict[str, int] = field(default_factory=dict)

    def outputs(self, step: Step) -> list[str]:
        if isinstance(step, Conv):
            return [step.out]
        names = [step.out, step.fused, step.head.out if step.head else None,
                 step.proj.out if step.proj else None]
        return [n for n in names if n]


def _conv(gm: nn.Module, name: str) -> tuple[nn.Conv2d, Tensor, Tensor]:
    """The BN-folded convolution ``name`` with its weight and bias, float32 on the CPU."""
    conv = gm.get_submodule(name)
    if not isinstance(conv, nn.Conv2d) or conv.bias is None:
        raise ValueError(f"{name}: expected a BN-folded Conv2d with a bias, got {conv}")
    return conv, conv.weight.detach().float().cpu(), conv.bias.detach().float().cpu()


def _linear_weight(gm: nn.Module, name: str) -> Tensor:
    """The weight of the linear layer ``name``, float32 on the CPU."""
    linear = gm.get_submodule(name)
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"{name}: expected a Linear layer, got {linear}")
    return linear.weight.detach().float().cpu()


class _Builder:
    """Emits steps while walking BlurBall's module tree (names as in ``blurball.py``)."""

    def __init__(self, gm: nn.Module, project_terms: str = "tail") -> None:
        self.gm = gm
        self.project_terms = project_terms
        self.plan = Plan()
        self.plan.buffers[INPUT] = Buffer(INPUT, 9, 0)
        self._count = 0

    def _new(self, channels: int, level: int, what: str = "x") -> str:
        self._count += 1
        name = f"{what}{self._count}"
        self.plan.buffers[name] = Buffer(name, channels, level)
        return name

    def _level(self, name: str) -> int:
        return self.plan.buffers[name].level

    def term(self, conv_name: str, src: str, up: int = 0) -> tuple[Term, Tensor]:
        conv, w, b = _conv(self.gm, conv_name)
        return Term(src, w, conv.stride[0], up), b

    def conv(
        self, names: list[tuple[str, str, int]], relu: bool = True,
        addends: tuple[tuple[str, int], ...] = (), se: bool = False,
    ) -> str:
        """One Conv step over ``(conv module, source buffer, up)`` terms; returns its output."""
        made = [self.term(n, src, up) for n, src, up in names]
        terms = tuple(t for t, _ in made)
        first = terms[0]
        level = self._level(first.src) - first.up + (first.stride == 2)
        for t in terms:
            if self._level(t.src) - t.up + (t.stride == 2) != level or (t.up and t.ksize != 1):
                raise ValueError(f"{names}: terms disagree on the output resolution")
        out = self._new(first.weight.shape[0], level)
        se_sum = None
        if se:
            se_sum = f"sum_{out}"
            self.plan.sums[se_sum] = first.weight.shape[0]
        bias = torch.stack([b for _, b in made]).sum(0)
        self.plan.steps.append(Conv(out, terms, bias, addends, relu, se_sum))
        return out

    def block_start(self, prefix: str, x: str) -> tuple[str, str]:
        """conv1 + conv2 of a BasicBlock: returns (y, its SE sum buffer)."""
        h = self.conv([(f"{prefix}.conv1", x, 0)])
        y = self.conv([(f"{prefix}.conv2", h, 0)], relu=False, se=True)
        return y, f"sum_{y}"

    def tail(self, prefix: str, y: str, x: str, se_sum: str, **fuse: object) -> SqueezeTail:
        fc1 = _linear_weight(self.gm, f"{prefix}.se.fc.0")
        fc2 = _linear_weight(self.gm, f"{prefix}.se.fc.2")
        return SqueezeTail(y, x, se_sum, fc1, fc2, **fuse)  # type: ignore[arg-type]

    def hr_module(
        self, prefix: str, xs: list[str], needed: list[int], head: str | None = None,
        blocks: int = 2,
    ) -> list[str | None]:
        """One HighResolutionModule; returns its outputs (None where not ``needed``)."""
        n = len(xs)
        finest_tail: tuple[str, str, str, str] | None = None  # branch 0's last block, deferred
        for i in range(n):
            x = xs[i]
            for k in range(blocks):
                p = f"{prefix}.branches.{i}.{k}"
                y, s = self.block_start(p, x)
                if i == 0 and k == blocks - 1:
                    finest_tail = (p, y, x, s)
                    continue
                x_next = self._new(self.plan.buffers[x].channels, self._level(x))
                self.plan.steps.append(self.tail(p, y, x, s, out=x_next))
                x = x_next
            xs[i] = x
        assert finest_tail is not None
        outs: list[str | None] = [None] * n
        xs[0] = self._finest(prefix, finest_tail, xs, needed, head, outs)
        for i in needed:
            if i > 0:
                outs[i] = self._fuse_output(prefix, xs, i)
        return outs

    def _finest(
        self, prefix: str, tail: tuple[str, str, str, str], xs: list[str], needed: list[int],
        head: str | None, outs: list[str | None],
    ) -> str:
        """Branch 0's last SqueezeTail, fused with output 0 (and the head if given)."""
        p, y, x, s = tail
        keep_t = any(i > 0 for i in needed)
        t = self._new(self.plan.buffers[x].channels, self._level(x)) if keep_t else None
        made = [self.term(f"{prefix}.fuse_layers.0.{j}.0", xs[j], up=j) for j in range(1, len(xs))]
        terms = tuple(m[0] for m in made)
        if self.project_terms != "off":
            terms = tuple(self._project(term) for term in terms)
        bias = torch.stack([m[1] for m in made]).sum(0)
        fused = self._new(self.plan.buffers[x].channels, 0) if head is None else None
        head_step = None
        if head is not None:
            conv, w, b = _conv(self.gm, head)
            self.plan.buffers[OUTPUT] = Buffer(OUTPUT, conv.out_channels, 0)
            head_step = Head(OUTPUT, w[:, :, 0, 0], b)
        self.plan.steps.append(
            self.tail(p, y, x, s, out=t, terms=terms, bias=bias, fused=fused, head=head_step)
        )
        outs[0] = fused
        return t if t is not None else x

    def _project(self, term: Term) -> Term:
        """An upsampled 1×1 term computed at its source's resolution (no bias, no ReLU) by
        the tail that produces the source or by a Conv step, and the term that adds it
        (``project_terms``)."""
        cout = term.weight.shape[0]
        if not term.up or term.ksize != 1 or term.cin < 2 * cout:
            return term
        out = self._new(cout, self._level(term.src), "p")
        steps = self.plan.steps
        producer = next(i for i, s in enumerate(steps) if term.src in self.plan.outputs(s))
        tail = steps[producer]
        if (self.project_terms == "tail" and isinstance(tail, SqueezeTail)
                and tail.out == term.src and not tail.terms and tail.proj is None):
            proj = Head(out, term.weight[:, :, 0, 0], torch.zeros(cout))
            steps[producer] = replace(tail, proj=proj)
        else:
            steps.append(Conv(out, (Term(term.src, term.weight),), torch.zeros(cout)))
        return Term(out, torch.eye(cout)[:, :, None, None], up=term.up, add=True)

    def _fuse_output(self, prefix: str, xs: list[str], i: int) -> str:
        """relu(sum_j path_j(x_j)) for output i > 0: one Conv, after any stride-2 intermediates."""
        terms: list[tuple[str, str, int]] = []
        for j in range(i):
            src = xs[j]
            path = f"{prefix}.fuse_layers.{i}.{j}"
            for k in range(i - j - 1):  # conv-BN-ReLU stride-2 steps before the last
                src = self.conv([(f"{path}.{k}.0", src, 0)])
            terms.append((f"{path}.{i - j - 1}.0", src, 0))
        for j in range(i + 1, len(xs)):
            terms.append((f"{prefix}.fuse_layers.{i}.{j}.0", xs[j], j - i))
        return self.conv(terms, addends=((xs[i], 0),))


def build_plan(model: nn.Module, project_terms: str = "tail") -> Plan:
    """The step list of a BlurBall (BatchNorms folded here unless ``model`` has none left);
    ``project_terms``: ``"tail"``, ``"conv"`` or ``"off"``, see the module's docstring."""
    if project_terms not in ("tail", "conv", "off"):
        raise ValueError(f"project_terms: 'tail', 'conv' or 'off', got {project_terms!r}")
    gm = model
    if any(isinstance(m, nn.BatchNorm2d) for m in model.modules()):
        from ttball.passes import fold_batchnorm

        gm, _ = fold_batchnorm(model)
    if not isinstance(gm, fx.GraphModule | nn.Module):
        raise TypeError(f"expected a BlurBall module, got {type(model)}")
    b = _Builder(gm, project_terms)
    x = b.conv([("conv1", INPUT, 0)])
    x = b.conv([("conv2", x, 0)])
    h = b.conv([("layer1.0.conv1", x, 0)])
    h = b.conv([("layer1.0.conv2", h, 0)])
    x = b.conv([("layer1.0.conv3", h, 0), ("layer1.0.downsample.0", x, 0)])
    xs = [b.conv([("transition1.0.0", x, 0)]), b.conv([("transition1.1.0.0", x, 0)])]
    outs = b.hr_module("stage2.0", xs, needed=[0, 1])
    xs = [o for o in outs if o is not None]
    xs.append(b.conv([("transition2.2.0.0", xs[-1], 0)]))
    outs = b.hr_module("stage3.0", xs, needed=[0, 1, 2])
    xs = [o for o in outs if o is not None]
    xs.append(b.conv([("transition3.3.0.0", xs[-1], 0)]))
    b.hr_module("stage4.0", xs, needed=[0], head="final_layers.0")
    return b.plan


def _bytes(plan: Plan, name: str, height: int, width: int) -> int:
    buf = plan.buffers[name]
    itemsize = 4 if name in (INPUT, OUTPUT) else 2  # the batch and logits are float32
    return (height >> buf.level) * (width >> buf.level) * buf.channels * itemsize


def step_cost(plan: Plan, step: Step, height: int, width: int) -> dict[str, int]:
    """Per window: multiply-add FLOPs as the module counts them (upsampled 1×1 terms at the
    output resolution, as computed here), and the activation bytes read and written once each
    (weights and SE vectors left out: 3 MB per call, shared by the batch)."""
    out = step.out if isinstance(step, Conv) else step.y
    level = plan.buffers[out].level
    pixels = (height >> level) * (width >> level)
    flops = sum(2 * pixels * t.weight.numel() for t in step.terms if not t.add)
    reads = [t.src for t in step.terms]
    if isinstance(step, Conv):
        reads += [name for name, _ in step.addends]
    else:
        reads += [step.y, step.residual]
        for head in (step.head, step.proj):
            if head is not None:
                flops += 2 * pixels * head.weight.numel()
    read = sum(_bytes(plan, n, height, width) for n in dict.fromkeys(reads))
    written = sum(_bytes(plan, n, height, width) for n in plan.outputs(step))
    return {"flops": flops, "bytes_read": read, "bytes_written": written}


def plan_cost(plan: Plan, height: int, width: int) -> dict[str, int]:
    """Totals of :func:`step_cost` over the plan, plus the number of steps (kernels)."""
    total = {"flops": 0, "bytes_read": 0, "bytes_written": 0}
    for step in plan.steps:
        for key, value in step_cost(plan, step, height, width).items():
            total[key] += value
    return {**total, "steps": len(plan.steps)}

"""The activations one input shape's call uses (:class:`Buffers`: NHWC FP16 tensors reused
by liveness, the SE sums in one zeroed block) and which steps touch which: :func:`reads_of`
(the buffers a step reads), :func:`hazards` (what a step must wait for when steps run
concurrently), :func:`pair_steps` (the residual blocks one kernel can run)."""

from __future__ import annotations

import torch
from torch import Tensor

from ttball.kernels.direct import pair_applies
from ttball.kernels.plan import INPUT, LEVELS, OUTPUT, Conv, Plan, SqueezeTail, Step


class Buffers:
    """Activations for one input shape, reused by liveness; SE sums in one zeroed block."""

    def __init__(self, plan: Plan, batch: int, height: int, width: int, device: torch.device):
        if height % 2 ** (LEVELS - 1) or width % 2 ** (LEVELS - 1):
            raise ValueError(f"height and width must be multiples of {2 ** (LEVELS - 1)}")
        last_use: dict[str, int] = {}
        for i, step in enumerate(plan.steps):
            for name in reads_of(step):
                last_use[name] = i
        self.tensors: dict[str, Tensor] = {}
        pool: dict[tuple[int, int], list[Tensor]] = {}
        for i, step in enumerate(plan.steps):
            for name in plan.outputs(step):
                if name == OUTPUT:
                    continue
                buf = plan.buffers[name]
                free = pool.get((buf.channels, buf.level))
                self.tensors[name] = free.pop() if free else torch.empty(
                    batch, height >> buf.level, width >> buf.level, buf.channels,
                    device=device, dtype=torch.float16,
                )
            for name in reads_of(step):
                if last_use[name] == i and name != INPUT:
                    buf = plan.buffers[name]
                    pool.setdefault((buf.channels, buf.level), []).append(self.tensors[name])
        self.logits = torch.empty(batch, plan.buffers[OUTPUT].channels, height, width,
                                  device=device)
        self.tensors[OUTPUT] = self.logits.permute(0, 2, 3, 1)
        total = sum(plan.sums.values())
        self.sum_block = torch.zeros(batch * total, device=device)
        self.sums: dict[str, Tensor] = {}
        offset = 0
        for name, c in plan.sums.items():
            self.sums[name] = self.sum_block[offset : offset + batch * c].view(batch, c)
            offset += batch * c


def reads_of(step: Step) -> list[str]:
    names = [t.src for t in step.terms]
    if isinstance(step, Conv):
        names += [a for a, _ in step.addends]
    else:
        names += [step.y, step.residual]
    return list(dict.fromkeys(names))


def main_output(step: Step) -> str:
    return step.out if isinstance(step, Conv) else step.y


def pair_steps(plan: Plan) -> list[int]:
    """Indices ``i`` of the residual blocks whose conv1 (step ``i``) and conv2 (step ``i + 1``)
    :func:`~ttball.kernels.direct.pair_applies` to, conv1's output read by conv2 alone."""
    readers: dict[str, int] = {}
    for step in plan.steps:
        for name in reads_of(step):
            readers[name] = readers.get(name, 0) + 1
    return [i for i, (a, b) in enumerate(zip(plan.steps, plan.steps[1:]))
            if isinstance(a, Conv) and isinstance(b, Conv) and pair_applies(a, b)
            and readers.get(a.out) == 1]


def hazards(plan: Plan, bufs: Buffers) -> list[list[int]]:
    """For each step, the earlier steps it must wait for when steps may run concurrently:
    the last writer of every tensor it reads (read after write) and, for every tensor it
    writes, that tensor's last writer and its readers since (write after write, write after
    read). Tensors are compared by storage, since :class:`Buffers` reuses a tensor once its
    buffer is dead; squeeze-excitation sums count as tensors (the conv writes, the tail
    reads)."""
    def key(t: Tensor) -> int:
        return int(t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size())

    writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    out: list[list[int]] = []
    for i, step in enumerate(plan.steps):
        reads = [bufs.tensors[n] for n in reads_of(step)]
        writes = [bufs.tensors[n] for n in plan.outputs(step)]
        if isinstance(step, Conv) and step.se_sum:
            writes.append(bufs.sums[step.se_sum])
        if isinstance(step, SqueezeTail):
            reads.append(bufs.sums[step.se_sum])
        deps: set[int] = set()
        for t in reads:
            if key(t) in writer:
                deps.add(writer[key(t)])
        for t in writes:
            if key(t) in writer:
                deps.add(writer[key(t)])
            deps.update(readers.get(key(t), []))
        for t in reads:
            readers.setdefault(key(t), []).append(i)
        for t in writes:
            writer[key(t)], readers[key(t)] = i, []
        deps.discard(i)
        out.append(sorted(deps))
    return out

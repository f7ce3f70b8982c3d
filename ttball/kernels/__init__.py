"""Our own Triton kernels for BlurBall (issue 9): a fused step plan, its PyTorch reference, and
the kernels that execute it (``triton-fp16`` backend).

:mod:`ttball.kernels.plan` and :mod:`ttball.kernels.reference` need only PyTorch. The kernel
modules (:mod:`~ttball.kernels.conv`, :mod:`~ttball.kernels.elementwise`,
:mod:`~ttball.kernels.launches`, :mod:`~ttball.kernels.executor`) import Triton; Triton decides at decoration time whether a
kernel is compiled or interpreted, so ``TRITON_INTERPRET=1`` (the CPU tests) must be set before
they are first imported.
"""

from ttball.kernels.plan import Buffer, Conv, Head, Plan, SqueezeTail, Term, build_plan, plan_cost
from ttball.kernels.reference import run_reference

__all__ = [
    "Buffer",
    "Conv",
    "Head",
    "Plan",
    "SqueezeTail",
    "Term",
    "build_plan",
    "plan_cost",
    "run_reference",
]

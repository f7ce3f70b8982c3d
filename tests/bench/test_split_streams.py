"""scripts/gpu_split_streams.py's twin executors: the tuned configurations shared, the buffers
not (so two sub-batches can run at once); on the CPU through Triton's interpreter."""

from __future__ import annotations

import pytest
import torch
from script_env import load_script

split_streams = load_script("gpu_split_streams")

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def test_a_twin_runs_the_same_configurations_into_buffers_of_its_own() -> None:
    pytest.importorskip("triton")
    from ttball.kernels import build_plan
    from ttball.kernels.configs import Config
    from ttball.kernels.executor import TritonExecutor
    from ttball.model import BlurBall, randomize_batchnorm

    plan = build_plan(randomize_batchnorm(BlurBall(), seed=0).eval())
    device = torch.device("cpu")
    gen = torch.Generator().manual_seed(0)
    a_in, b_in = (torch.randn(1, 9, 16, 32, generator=gen) for _ in range(2))
    shape = tuple(a_in.shape)
    first = TritonExecutor(plan, device, config=Config(512, 4, 2))
    a_out = first(a_in).clone()
    second = TritonExecutor(plan, device, config=Config(1024, 4, 2))  # would differ untwinned
    split_streams.twin(second, first, shape)
    assert second._configs[shape] == first._configs[shape]
    ours = {t.data_ptr() for t in second._buffers[shape].tensors.values() if t.numel()}
    theirs = {t.data_ptr() for t in first._buffers[shape].tensors.values() if t.numel()}
    assert not ours & theirs
    b_out = second(b_in).clone()
    assert torch.equal(first(a_in), a_out)  # the twin's call left the first's buffers alone
    assert torch.allclose(b_out, first(b_in), atol=1e-3)

"""The whole plan on the Triton kernels against the reference executor, and the backend's
registry entries."""

from __future__ import annotations

import pytest
import torch
from kernel_env import CUDA, DEVICE, require_triton

from ttball.backends import create, describe
from ttball.errors import BackendUnavailable
from ttball.kernels import build_plan, run_reference
from ttball.model import BlurBall, randomize_batchnorm

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def device() -> torch.device:
    return DEVICE


@pytest.fixture(scope="module")
def model() -> BlurBall:
    return randomize_batchnorm(BlurBall(), seed=0).eval()


@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
def test_whole_plan_matches_the_reference(model: BlurBall, device: torch.device,
                                          pdl: bool) -> None:
    """All 67 steps with buffers reused by liveness; one tile size keeps the interpreter fast
    (5-8 s on two CPU cores at 16×32). ``pdl``: every kernel launched with programmatic
    dependent launch (on a Hopper GPU for real; in the interpreter the same kernel code with the
    waits as no-ops, so what it checks there is that the reordered loads are still right)."""
    require_triton()
    from ttball.kernels.executor import Config, TritonExecutor
    from ttball.kernels.gdc import pdl_missing

    if pdl and CUDA and pdl_missing(device):
        pytest.skip(pdl_missing(device))
    plan = build_plan(model)
    x = torch.randn(1, 9, 16, 32, generator=torch.Generator().manual_seed(0))
    expected = run_reference(plan, x)
    config = None if CUDA else Config(512, 4, 2)  # on a GPU: the tuned configurations
    executor = TritonExecutor(plan, device, config=config, pdl=pdl)
    out = executor(x.to(device)).cpu()
    rel = ((out - expected).norm() / expected.norm()).item()
    assert rel < 2e-3, f"relative error {rel:.1e} against the FP32 reference"
    bufs = executor._buffers[tuple(x.shape)]
    assert len({t.data_ptr() for t in bufs.tensors.values()}) < len(plan.buffers) // 2
    tuned = executor.tuned(tuple(x.shape)).split("; ")
    assert len(tuned) == len(plan.steps) and executor.tuned((2, 9, 16, 32)) is None
    if not CUDA:
        assert tuned[0].endswith("=m512w4s2")
    assert Config(128, 8, 2, tile_w=16, k_chunk=64, l1=True).short() == "m128w8s2t16k64L1"


def test_backends_are_listed_with_their_reason(model: BlurBall) -> None:
    rows = {r["name"]: r for r in describe("cpu")}
    for name in ("triton-fp16", "triton-fp16-nograph", "triton-fp16-pdl", "triton-fp16-tma",
                 "triton-fp16-rows"):
        assert not rows[name]["available"] and "CUDA" in rows[name]["reason"]
        assert "fp16" in rows[name]["tags"]
        with pytest.raises(BackendUnavailable, match="CUDA"):
            create(name, model, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_pdl_backend_replays_the_same_logits_from_its_graph(model: BlurBall) -> None:
    """triton-fp16-pdl against triton-fp16 through the backends, CUDA graph capture and replay
    included: the programmatic edges must survive the capture and change nothing but timing."""
    from ttball.kernels.gdc import pdl_missing

    require_triton()
    if pdl_missing(DEVICE):
        pytest.skip(pdl_missing(DEVICE))
    x = torch.randn(2, 9, 72, 128, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    plain = create("triton-fp16", model, DEVICE, tune=False)
    pdl = create("triton-fp16-pdl", model, DEVICE, tune=False)
    want = plain(x).float().clone()
    for _ in range(3):  # the first call compiles, the second captures, the third replays
        got = pdl(x).float()
    rel = ((got - want).norm() / want.norm()).item()
    assert rel < 1e-3, f"relative difference {rel:.1e}"

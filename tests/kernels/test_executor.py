"""The whole plan on the Triton kernels against the reference executor, and the backend's
registry entries."""

from __future__ import annotations

import pytest
import torch
from kernel_env import CUDA, DEVICE, graph_replay_rel, require_triton

from ttball.backends import create, describe
from ttball.errors import BackendUnavailable
from ttball.kernels import Conv, Plan, SqueezeTail, build_plan, run_reference
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
    from ttball.kernels.configs import Config
    from ttball.kernels.executor import TritonExecutor
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


def _latest_first(deps: list[list[int]]) -> list[int]:
    """A step order that keeps ``deps`` but is as far from the plan's as it gets: of the steps
    whose dependencies are done, always the latest next."""
    done: set[int] = set()
    order: list[int] = []
    while len(order) < len(deps):
        nxt = max(i for i in range(len(deps)) if i not in done and set(deps[i]) <= done)
        order.append(nxt)
        done.add(nxt)
    return order


def _read_after_write(plan: Plan) -> list[list[int]]:
    """Each step's producers only: the last writer of each buffer and SE sum it reads."""
    from ttball.kernels.buffers import reads_of

    last: dict[str, int] = {}
    out = []
    for i, step in enumerate(plan.steps):
        names = reads_of(step) + ([step.se_sum] if isinstance(step, SqueezeTail) else [])
        out.append(sorted({last[n] for n in names if n in last}))
        for name in plan.outputs(step) + ([step.se_sum] if isinstance(step, Conv) and
                                          step.se_sum else []):
            last[name] = i
    return out


def test_steps_reordered_within_their_hazards_give_the_same_logits(
    model: BlurBall, device: torch.device,
) -> None:
    """What ``branches`` relies on: any order that keeps :func:`hazards` (read after write,
    and write after read or write of the tensors the buffers reuse) computes the same logits.
    Keeping only the read-after-write edges does not: a reused buffer is overwritten before
    its last reader ran, which is why the other edges are there."""
    require_triton()
    from ttball.kernels.buffers import hazards
    from ttball.kernels.configs import Config
    from ttball.kernels.executor import TritonExecutor

    plan = build_plan(model)
    x = torch.randn(1, 9, 16, 32, generator=torch.Generator().manual_seed(0)).to(device)
    config = None if CUDA else Config(512, 4, 2)
    executor = TritonExecutor(plan, device, config=config)
    want = executor(x).clone()
    shape = tuple(x.shape)
    bufs, configs = executor._buffers[shape], executor._configs[shape]

    def run(order: list[int]) -> torch.Tensor:
        bufs.sum_block.zero_()
        for i in order:
            executor.launches[i](bufs.tensors, bufs.sums, configs[i])
        return bufs.logits.clone()

    deps = hazards(plan, bufs)
    assert all(j < i for i, d in enumerate(deps) for j in d)
    order = _latest_first(deps)
    assert order != sorted(order)
    assert torch.equal(run(order), want)
    assert not torch.equal(run(_latest_first(_read_after_write(plan))), want)


def test_backends_are_listed_with_their_reason(model: BlurBall) -> None:
    rows = {r["name"]: r for r in describe("cpu")}
    for name in ("triton-fp16", "triton-fp16-nograph", "triton-fp16-pdl", "triton-fp16-tma",
                 "triton-fp16-rows", "triton-fp16-branches", "triton-fp16-direct",
                 "triton-fp16-branches-refined"):
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
    rel = graph_replay_rel(pdl, plain, x)
    assert rel < 1e-3, f"relative difference {rel:.1e}"


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_branches_backend_replays_the_same_logits_from_its_graph(model: BlurBall) -> None:
    """triton-fp16-branches against triton-fp16, graph capture and replay included: the
    streams' fork, event waits and join must survive the capture and change only timing."""
    require_triton()
    x = torch.randn(2, 9, 72, 128, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    plain = create("triton-fp16", model, DEVICE, tune=False)
    branches = create("triton-fp16-branches", model, DEVICE, tune=False)
    rel = graph_replay_rel(branches, plain, x)
    assert rel < 1e-3, f"relative difference {rel:.1e}"

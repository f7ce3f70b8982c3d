"""The step plan and its PyTorch reference executor against the BlurBall module (CPU, FP32)."""

from __future__ import annotations

import pytest
import torch

from ttball.kernels import Conv, SqueezeTail, build_plan, plan_cost, run_reference
from ttball.model import BlurBall, randomize_batchnorm
from ttball.passes import fold_batchnorm

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def model() -> BlurBall:
    return randomize_batchnorm(BlurBall(), seed=0).eval()


@pytest.mark.parametrize("project", [True, False])
@pytest.mark.parametrize("shape", [(1, 9, 32, 64), (2, 9, 16, 24)])
def test_reference_matches_the_module(model: BlurBall, shape: tuple[int, ...],
                                      project: bool) -> None:
    """Two images per batch: the SE means must stay per image; with and without the coarse
    terms projected at their own resolution."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = model(x)[0]
    out = run_reference(build_plan(model, project_terms=project), x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_projected_terms_are_16_channel_maps_at_their_sources_resolution(model: BlurBall) -> None:
    """Branch 0's last tails (stages 2-4) add 1, 2 and 3 coarse maps, each made by a 1×1 Conv
    step at its source's level just before; nothing else changes."""
    plain, plan = build_plan(model, project_terms=False), build_plan(model)
    assert len(plan.steps) == len(plain.steps) + 6
    tails = [s for s in plan.steps if isinstance(s, SqueezeTail) and s.terms]
    assert [len(t.terms) for t in tails] == [1, 2, 3]
    index = {s.out: i for i, s in enumerate(plan.steps) if isinstance(s, Conv)}
    for tail in tails:
        at = plan.steps.index(tail)
        for term in tail.terms:
            assert term.add and term.ksize == 1 and term.up >= 1
            assert torch.equal(term.weight[:, :, 0, 0], torch.eye(16))
            conv = plan.steps[index[term.src]]
            assert index[term.src] < at and not conv.relu and not conv.bias.any()
            (src,) = conv.terms
            assert src.ksize == 1 and src.up == 0 and src.cin in (32, 64, 128)
            assert plan.buffers[conv.out].level == plan.buffers[src.src].level == term.up
    others = [s for s in plan.steps if not (isinstance(s, Conv) and s.out.startswith("p"))]
    assert len(others) == len(plain.steps)


def test_plan_from_a_folded_model_is_the_same(model: BlurBall) -> None:
    folded, _ = fold_batchnorm(model)
    a, b = build_plan(model), build_plan(folded)
    assert len(a.steps) == len(b.steps)
    x = torch.randn(1, 9, 16, 32)
    torch.testing.assert_close(run_reference(a, x), run_reference(b, x), rtol=0, atol=0)


def test_plan_shape(model: BlurBall) -> None:
    """67 steps: 7 stem/transition convs, 3 per BasicBlock (18 blocks), 6 fuse/transition
    convs, and 6 projections of coarse terms; every SE sum is produced by one conv and read by
    one tail."""
    plan = build_plan(model)
    convs = [s for s in plan.steps if isinstance(s, Conv)]
    tails = [s for s in plan.steps if isinstance(s, SqueezeTail)]
    assert (len(plan.steps), len(convs), len(tails)) == (73, 55, 18)
    assert sorted(s.se_sum for s in convs if s.se_sum) == sorted(t.se_sum for t in tails)
    assert sum(t.head is not None for t in tails) == 1 and plan.steps[-1].head is not None
    written = [n for s in plan.steps for n in plan.outputs(s)]
    assert len(written) == len(set(written)), "every buffer is written by one step"


def test_cost_accounting(model: BlurBall) -> None:
    """FLOPs close to the module's 56.3 G per 288×512 window (stage 4's unused outputs are
    dropped, the upsampled 1×1 paths cost more at full resolution)."""
    cost = plan_cost(build_plan(model, project_terms=False), 288, 512)
    assert 54e9 < cost["flops"] < 58e9
    assert cost["steps"] == 67
    projected = plan_cost(build_plan(model), 288, 512)
    # the coarse terms' FLOPs at their own resolution: 1.5 G fewer; 8 MB more unique bytes
    assert 1.4e9 < cost["flops"] - projected["flops"] < 1.6e9 and projected["steps"] == 73
    assert 5e8 < cost["bytes_read"] + cost["bytes_written"] < 8e8

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


@pytest.mark.parametrize("project", ["tail", "conv", "off"])
@pytest.mark.parametrize("shape", [(1, 9, 32, 64), (2, 9, 16, 24)])
def test_reference_matches_the_module(model: BlurBall, shape: tuple[int, ...],
                                      project: str) -> None:
    """Two images per batch: the SE means must stay per image; with and without the coarse
    terms projected at their own resolution."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = model(x)[0]
    out = run_reference(build_plan(model, project_terms=project), x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def _producers(plan) -> dict[str, int]:
    return {name: i for i, s in enumerate(plan.steps) for name in plan.outputs(s)}


def test_projected_terms_are_16_channel_maps_at_their_sources_resolution(model: BlurBall) -> None:
    """Branch 0's last tails (stages 2-4) add 1, 2 and 3 coarse maps. "conv": each made by a
    1×1 Conv step at its source's level before the tail; "tail" (the default): by the
    SqueezeTail that writes the source, so the steps are the same 67 as without."""
    plain = build_plan(model, project_terms="off")
    conv_plan, plan = build_plan(model, project_terms="conv"), build_plan(model)
    assert len(conv_plan.steps) == len(plain.steps) + 6 and len(plan.steps) == len(plain.steps)
    for p in (conv_plan, plan):
        tails = [s for s in p.steps if isinstance(s, SqueezeTail) and s.terms]
        assert [len(t.terms) for t in tails] == [1, 2, 3]
        made_by = _producers(p)
        for tail in tails:
            for term in tail.terms:
                assert term.add and term.ksize == 1 and term.up >= 1
                assert torch.equal(term.weight[:, :, 0, 0], torch.eye(16))
                assert made_by[term.src] < p.steps.index(tail)
                assert p.buffers[term.src].level == term.up
                maker = p.steps[made_by[term.src]]
                if p is conv_plan:
                    (src,) = maker.terms
                    assert not maker.relu and not maker.bias.any() and src.ksize == 1
                    assert src.cin in (32, 64, 128) and p.buffers[src.src].level == term.up
                else:
                    assert isinstance(maker, SqueezeTail) and maker.proj.out == term.src
                    assert maker.proj.weight.shape[1] == maker.channels in (32, 64, 128)
                    assert p.buffers[maker.out].level == term.up and not maker.proj.bias.any()
    assert sum(isinstance(s, SqueezeTail) and s.proj is not None for s in plan.steps) == 6


def test_an_unknown_projection_mode_is_refused(model: BlurBall) -> None:
    with pytest.raises(ValueError, match="project_terms"):
        build_plan(model, project_terms="yes")


def test_plan_from_a_folded_model_is_the_same(model: BlurBall) -> None:
    folded, _ = fold_batchnorm(model)
    a, b = build_plan(model), build_plan(folded)
    assert len(a.steps) == len(b.steps)
    x = torch.randn(1, 9, 16, 32)
    torch.testing.assert_close(run_reference(a, x), run_reference(b, x), rtol=0, atol=0)


def test_plan_shape(model: BlurBall) -> None:
    """67 steps: 7 stem/transition convs, 3 per BasicBlock (18 blocks), 6 fuse/transition
    convs; every SE sum is produced by one conv and read by one tail."""
    plan = build_plan(model)
    convs = [s for s in plan.steps if isinstance(s, Conv)]
    tails = [s for s in plan.steps if isinstance(s, SqueezeTail)]
    assert (len(plan.steps), len(convs), len(tails)) == (67, 49, 18)
    assert sorted(s.se_sum for s in convs if s.se_sum) == sorted(t.se_sum for t in tails)
    assert sum(t.head is not None for t in tails) == 1 and plan.steps[-1].head is not None
    written = [n for s in plan.steps for n in plan.outputs(s)]
    assert len(written) == len(set(written)), "every buffer is written by one step"


def test_cost_accounting(model: BlurBall) -> None:
    """FLOPs close to the module's 56.3 G per 288×512 window (stage 4's unused outputs are
    dropped, the upsampled 1×1 paths cost more at full resolution)."""
    cost = plan_cost(build_plan(model, project_terms="off"), 288, 512)
    assert 54e9 < cost["flops"] < 58e9
    assert cost["steps"] == 67
    # the coarse terms' FLOPs at their own resolution: 1.5 G fewer
    for mode, steps in (("conv", 73), ("tail", 67)):
        projected = plan_cost(build_plan(model, project_terms=mode), 288, 512)
        assert 1.4e9 < cost["flops"] - projected["flops"] < 1.6e9 and projected["steps"] == steps
    assert 5e8 < cost["bytes_read"] + cost["bytes_written"] < 8e8

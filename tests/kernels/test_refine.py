"""Choosing step configurations in the whole graph (ttball.kernels.refine): the greedy pass
keeps what makes the graph faster and only that, tries only near runners-up, leaves slow
graphs alone, and a final check undoes a change that a lucky timing let through. On a GPU,
the refined backend computes what triton-fp16 computes."""

from __future__ import annotations

import pytest
import torch
from kernel_env import CUDA, DEVICE, graph_replay_rel, require_triton

from ttball.kernels.refine import refine


def _timed(*alone: float) -> list[tuple[float, str]]:
    """Candidates named a, b, c, … with these times alone, fastest first."""
    return sorted(((ms, "abcdef"[k]) for k, ms in enumerate(alone)), key=lambda p: p[0])


def _graph(costs: dict[tuple[int, str], float], base: float = 1.0):
    """A graph whose time is ``base`` plus each step's cost for its configuration."""
    calls: list[list[str]] = []

    def graph_ms(configs: list[str]) -> float:
        calls.append(list(configs))
        return base + sum(costs.get((i, c), 0.0) for i, c in enumerate(configs))

    return graph_ms, calls


def test_it_keeps_a_runner_up_that_is_faster_in_the_graph_and_only_that() -> None:
    # step 0: b is 10 % slower alone but 0.05 ms faster in the graph; step 1: b is slower
    timed = [_timed(0.10, 0.11), _timed(0.05, 0.06)]
    graph_ms, _ = _graph({(0, "b"): -0.05, (1, "b"): +0.02})
    configs, report = refine(["a", "a"], timed, graph_ms)
    assert configs == ["b", "a"]
    assert report.changed == [(0, "a", "b")]
    assert report.before_ms == pytest.approx(1.0) and report.after_ms == pytest.approx(0.95)
    assert "1 steps changed" in report.summary()


def test_it_tries_only_runners_up_near_the_fastest_and_the_slowest_steps_first() -> None:
    timed = [_timed(0.01, 0.012), _timed(0.10, 0.20, 0.14)]  # step 1's b: 2x alone
    graph_ms, calls = _graph({})
    configs, report = refine(["a", "a"], timed, graph_ms, within=1.5)
    assert configs == ["a", "a"] and report.changed == []
    tried = [c for c in calls[1:]]
    assert tried == [["a", "c"], ["b", "a"]]  # step 1 (slower) first, its b (2x) never
    assert report.evaluations == 3


def test_a_slow_graph_is_left_alone() -> None:
    graph_ms, calls = _graph({(0, "b"): -1.0}, base=20.0)
    configs, report = refine(["a"], [_timed(1.0, 1.01)], graph_ms, max_ms=5.0)
    assert configs == ["a"] and len(calls) == 1
    assert report.skipped and "20.00 ms" in report.summary()


def test_the_final_check_undoes_a_change_a_lucky_timing_let_through() -> None:
    times = iter([1.00, 0.90,  # baseline, then the trial of step 0's b: lucky
                  1.00, 1.01, 1.00, 1.02, 1.00, 1.01])  # the check: original, refined, ...

    configs, report = refine(["a"], [_timed(0.1, 0.105)], lambda cfgs: next(times))
    assert configs == ["a"]
    assert report.changed == [] and "did not confirm" in (report.skipped or "")


def test_it_needs_one_timing_list_per_step() -> None:
    with pytest.raises(ValueError, match="2 configurations for 1 steps"):
        refine(["a", "a"], [_timed(0.1)], lambda cfgs: 1.0)
    with pytest.raises(ValueError, match="1 lists of extra candidates"):
        refine(["a", "a"], [_timed(0.1), _timed(0.1)], lambda cfgs: 1.0, extra=[["p"]])


def test_extra_candidates_are_tried_whatever_their_time_alone() -> None:
    """A step on part of the GPU is slower alone; only the graph can say if it pays."""
    timed = [_timed(0.10, 0.30), _timed(0.05)]  # step 0's b: 3x alone, never tried
    graph_ms, calls = _graph({(0, "b"): -0.5, (1, "p"): -0.04, (0, "q"): +0.1})
    configs, report = refine(["a", "a"], timed, graph_ms, extra=[["q"], ["p"]])
    assert configs == ["a", "p"] and report.changed == [(1, "a", "p")]
    assert ["b", "a"] not in calls and ["q", "a"] in calls


def test_a_start_that_pays_only_as_a_whole_is_kept_and_refined_from() -> None:
    """Limiting one step alone costs; limiting both at once pays (the SMs they leave free)."""
    costs = {(0, "p"): +0.02, (1, "p"): +0.02}

    def graph_ms(configs: list[str]) -> float:
        both = configs == ["p", "p"]
        return 1.0 + sum(costs.get((i, c), 0.0) for i, c in enumerate(configs)) - 0.1 * both

    timed = [_timed(0.1, 0.11), _timed(0.1)]
    configs, report = refine(["a", "a"], timed, graph_ms, extra=[["p"], ["p"]],
                             starts=[["p", "p"], ["a", "p"]])
    assert configs == ["p", "p"] and report.after_ms == pytest.approx(0.94)
    with pytest.raises(ValueError, match="a start of 1 configurations for 2 steps"):
        refine(["a", "a"], timed, graph_ms, starts=[["p"]])


def test_side_branch_conv_steps_get_grid_limited_candidates() -> None:
    """Levels 1-3 only, a quarter and half of the SMs, and only where the grid is larger."""
    require_triton()
    from ttball.kernels import build_plan
    from ttball.kernels.buffers import Buffers, main_output
    from ttball.kernels.configs import Config
    from ttball.kernels.executor import TritonExecutor
    from ttball.kernels.launches import ConvLaunch
    from ttball.model import BlurBall, randomize_batchnorm

    plan = build_plan(randomize_batchnorm(BlurBall(), seed=0).eval())
    executor = TritonExecutor(plan, torch.device("cpu"), tune=False)
    bufs = Buffers(plan, 1, 144, 256, torch.device("cpu"))
    offered = {}
    for launch in executor.launches:
        level = plan.buffers[main_output(launch.step)].level
        got = executor._grid_limited(launch, Config(128, 4, 2), bufs, sms=132)
        offered.setdefault(level, set()).update(c.programs for c in got)
        assert all(c == Config(128, 4, 2, programs=c.programs) for c in got)
        if not isinstance(launch, ConvLaunch):
            assert got == []
        assert executor._grid_limited(launch, Config(128, 4, 1, rows=16), bufs, 132) == []
    # level 1 at 144 x 256: 72 x 128 pixels, 72 tiles of 128; level 2: 18; level 3: 5
    assert offered == {0: set(), 1: {33, 66}, 2: set(), 3: set()}


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_refined_backend_replays_the_same_logits_as_triton() -> None:
    from ttball.backends import create
    from ttball.model import BlurBall, randomize_batchnorm

    require_triton()
    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    x = torch.randn(1, 9, 72, 128, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    plain = create("triton-fp16", model, DEVICE)
    refined = create("triton-fp16-branches-refined", model, DEVICE, records=False)  # refines
    rel = graph_replay_rel(refined, plain, x)
    assert rel < 1e-3, f"relative difference {rel:.1e}"
    report = refined.refinements[tuple(x.shape)]
    assert report.skipped is None or not report.skipped.startswith("failed"), report.skipped
    assert report.evaluations >= 1 and report.after_ms <= report.before_ms
    assert refined.tuned(tuple(x.shape)).startswith(f"refine: {report.summary()}; ")

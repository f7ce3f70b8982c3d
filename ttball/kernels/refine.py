"""Choosing step configurations in the whole graph, not each step alone (issue 9, batch 1).

The tuner times each step alone and keeps its fastest configuration. With HRNet's branches on
streams of their own (``triton-fp16-branches``), steps run side by side and compete for the
SMs: at batch 1 the graph takes 0.46 ms where its critical path, from the steps' times
alone, is 0.35 ms (``docs/benchmarks/triton-h200.md``). A configuration that is slightly
slower alone can be faster in the graph, for instance a smaller grid for a side branch's
step that leaves SMs to the full-resolution path.

:func:`refine` is a greedy pass over the steps, the slowest first. For each step it tries the
runners-up of the tuner's own timing that were within ``within`` of the fastest alone, timing
the whole graph with each, and keeps a change only if the graph gets faster by more than
``min_gain``. A final check times the original and the refined choice alternately and keeps
the refined one only if it still wins, so noise in one timing cannot make the result slower
than the tuner's. :meth:`ttball.kernels.executor.TritonExecutor.refine` also offers each side
branch's conv step (levels 1-3) on a quarter and on half of the SMs (``Config.programs``), which
the per-step tuner never picks: alone they are slower.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Timed = Sequence[tuple[float, Any]]  # (ms alone, config), fastest first


@dataclass
class Refinement:
    """What :func:`refine` did: the graph's time before and after (medians of the final
    check), the steps it changed, and how many graph timings it took."""

    before_ms: float
    after_ms: float
    changed: list[tuple[int, str, str]] = field(default_factory=list)  # step, old, new
    evaluations: int = 0
    skipped: str | None = None

    def summary(self) -> str:
        if self.skipped:
            return f"not refined: {self.skipped}"
        gain = 100 * (1 - self.after_ms / self.before_ms)
        return (f"{self.before_ms:.3f} -> {self.after_ms:.3f} ms ({gain:+.1f} %), "
                f"{len(self.changed)} steps changed, {self.evaluations} graph timings")


def refine(
    configs: Sequence[Any], timed: Sequence[Timed], graph_ms: Callable[[list[Any]], float],
    within: float = 1.5, per_step: int = 2, min_gain: float = 0.005, max_ms: float = 5.0,
    checks: int = 3, name: Callable[[Any], str] = str,
    extra: Sequence[Sequence[Any]] | None = None, starts: Sequence[Sequence[Any]] = (),
) -> tuple[list[Any], Refinement]:
    """``configs`` (one per step, as tuned) and each step's ``timed`` candidates → the
    configurations to run and a :class:`Refinement`. ``graph_ms(configs)`` times the whole
    graph with them. ``extra``: per step, candidates tried after the runners-up whatever
    their time alone (slower alone by design, such as a step limited to part of the GPU).
    ``starts``: whole configurations timed before the greedy pass, which starts from the
    fastest of them if it beats the tuner's (changes that pay only together, such as every
    side step on part of the GPU at once). A graph slower than ``max_ms`` is left alone: each
    timing would cost too much, and large batches fill the GPU without contention."""
    if len(configs) != len(timed) or (extra is not None and len(extra) != len(timed)):
        raise ValueError(f"{len(configs)} configurations for {len(timed)} steps"
                         + (f" and {len(extra)} lists of extra candidates" if extra else ""))
    original = list(configs)
    best = graph_ms(original)
    evaluations = 1
    if best > max_ms:
        return original, Refinement(best, best, evaluations=evaluations,
                                    skipped=f"graph {best:.2f} ms > {max_ms} ms")
    current = list(original)
    for start in starts:
        if len(start) != len(original):
            raise ValueError(f"a start of {len(start)} configurations for {len(original)} steps")
        ms = graph_ms(list(start))
        evaluations += 1
        if ms < best * (1 - min_gain):
            best, current = ms, list(start)
    order = sorted(range(len(timed)), key=lambda i: -timed[i][0][0] if timed[i] else 0.0)
    for i in order:
        if not timed[i]:
            continue
        fastest = timed[i][0][0]
        runners_up = [cfg for ms, cfg in timed[i] if cfg != current[i] and ms <= within * fastest]
        more = [cfg for cfg in (extra[i] if extra else ()) if cfg != current[i]]
        for cfg in runners_up[:per_step] + more:
            trial = list(current)
            trial[i] = cfg
            ms = graph_ms(trial)
            evaluations += 1
            if ms < best * (1 - min_gain):
                best, current = ms, trial
    changed = [(i, name(a), name(b)) for i, (a, b) in enumerate(zip(original, current)) if a != b]
    if not changed:
        return original, Refinement(best, best, evaluations=evaluations)
    before, after = [], []
    for _ in range(checks):  # alternately, so drift hits both alike
        before.append(graph_ms(original))
        after.append(graph_ms(current))
    evaluations += 2 * checks
    b, a = statistics.median(before), statistics.median(after)
    if a >= b:
        return original, Refinement(b, b, evaluations=evaluations,
                                    skipped=f"the check did not confirm it ({a:.3f} >= {b:.3f} ms)")
    return current, Refinement(b, a, changed, evaluations)

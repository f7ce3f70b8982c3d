"""Runs a :class:`~ttball.kernels.plan.Plan` with the Triton kernels: one launch per step plus
one memset of the SE sums, so ``len(plan.steps) + 1`` kernels per call (68 for BlurBall).
Optionally every kernel is launched with programmatic dependent launch
(:mod:`ttball.kernels.gdc`), so each one's launch overlaps the end of the one before, and the
tuner gets candidates that read a 3×3 step's input through the tensor memory accelerator
(``tma=True``, :func:`~ttball.kernels.configs.tma_configs`) or, for the 16- and 32-channel 3×3
steps, walk down the image a row at a time (``rows=True``,
:func:`~ttball.kernels.configs.rows_configs`, :mod:`ttball.kernels.rows`). Steps of 1×1
stride-1 terms (the bottleneck's) also get candidates that keep the weights resident in a
persistent grid (:func:`~ttball.kernels.configs.pointwise_configs`,
:mod:`ttball.kernels.pointwise`).

The pieces: :mod:`ttball.kernels.configs` (a kernel configuration and each step's candidates),
:mod:`ttball.kernels.launches` (a step as a launch, its weights packed once: FP16, padded;
biases and SE weights float32), :mod:`ttball.kernels.buffers` (activations as NHWC FP16 buffers
allocated per input shape and reused along the plan by liveness; which step waits for which).
The batch is read in place (float32 NCHW, strided) by the first convolution; the logits are
written as float32 NCHW by the last kernel.

Tuning: on the first call of a shape each step is timed over its candidates (2-5
configurations a kind of kernel, CUDA events) and the fastest is kept for that shape; a
configuration that fails to compile or launch is skipped (its error kept in
``self.failures``). With ``tune=False``, or on CPU (``TRITON_INTERPRET=1``), the first
candidate is used.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from ttball.bench.timing import device_ms
from ttball.kernels.buffers import Buffers, hazards, main_output, pair_steps
from ttball.kernels.configs import Config, pair_configs, pair_waits
from ttball.kernels.direct import direct_library
from ttball.kernels.launches import ConvLaunch, Launch, launcher
from ttball.kernels.plan import INPUT, LEVELS, Conv, Plan
from ttball.kernels.precompile import Precompiled, TritonCall, compile_threads, precompile
from ttball.kernels.refine import Refinement, refine

TUNE_REPS = 3  # timed launches per candidate after one warm-up launch
PAIR_GAIN = 0.97  # a residual block's pair kernel replaces its two steps if this much faster
SHORT_MS, SHORT_REPS = 0.02, 20  # a candidate faster than this is timed again with more launches


class TritonExecutor:
    """``executor(batch (B, 9, H, W) float32 contiguous) -> logits (B, 3, H, W) float32``.

    The returned tensor is the shape's own output buffer, overwritten by the next call of that
    shape. ``cold_seconds[shape]`` is the first call's time (compiles and tuning included).
    ``pdl``: launch every kernel with programmatic dependent launch (sm_90+; the caller checks
    :func:`ttball.kernels.gdc.pdl_missing`). ``tma``: the tuner also times :func:`tma_configs`
    (sm_90+); ``rows``: and :func:`rows_configs`; ``direct`` (CUDA, the caller checks
    :func:`ttball.kernels.direct.direct_missing`): and :func:`direct_configs`, the CUDA C++
    direct convolution. ``branches`` (CUDA): after the first call of a
    shape, each step runs on the CUDA stream of its output's resolution, so HRNet's parallel
    branches run side by side; the steps wait for each other only where :func:`hazards` says
    (a CUDA graph captured from such a call keeps the same edges).
    """

    def __init__(
        self, plan: Plan, device: torch.device, tune: bool = True, config: Config | None = None,
        pdl: bool = False, tma: bool = False, rows: bool = False, branches: bool = False,
        direct: bool = False,
    ) -> None:
        self.plan, self.device = plan, device
        self.branches = branches and device.type == "cuda"
        self._streams: list[torch.cuda.Stream] = []  # branches: one per level but the first
        # branches: each level's stream priority (lower is more urgent; CUDA's default is 0,
        # the least); a level 0 priority other than 0 gives level 0 a stream of its own too
        self.lane_priority: tuple[int, ...] = (0,) * LEVELS
        self._events: list[torch.cuda.Event] = []
        self._waits: dict[tuple[int, ...], list[list[int]]] = {}  # branches: per shape, per step
        self.tune = tune and device.type == "cuda" and config is None
        self.config = config  # one configuration for every step (the interpreter tests)
        self.launches = [launcher(step, device, pdl, tma, rows, direct) for step in plan.steps]
        # direct: residual blocks whose two convolutions the pair kernel may run as one (the
        # first's index); the tuner decides per shape, or `forced_pair` for every one (tests)
        self.pairs = pair_steps(plan) if direct else []
        for i in self.pairs:
            first, second = self.launches[i], self.launches[i + 1]
            assert isinstance(first, ConvLaunch) and isinstance(second, ConvLaunch)  # pair_steps'
            first.partner = second
        self.forced_pair: Config | None = None
        # per shape: for each pair, (first step, ms of the two steps, ms of the pair, config,
        # taken)
        self.pair_trials: dict[tuple[int, ...], list[tuple[int, float, float, str, bool]]] = {}
        self._buffers: dict[tuple[int, ...], Buffers] = {}
        self._configs: dict[tuple[int, ...], list[Config]] = {}
        # per shape, per step: the tuner's candidates as (ms alone, config), fastest first
        self._timed: dict[tuple[int, ...], list[list[tuple[float, Config]]]] = {}
        self.failures: list[str] = []
        self.cold_seconds: dict[tuple[int, ...], float] = {}
        self.direct = direct
        # per shape: what the first call's precompiling did (CUDA, tuned)
        self.precompiled: dict[tuple[int, ...], Precompiled] = {}

    def __call__(self, batch: Tensor) -> Tensor:
        if batch.dim() != 4 or batch.shape[1] != 9 or not batch.is_contiguous():
            raise ValueError(f"expected a contiguous (B, 9, H, W) batch, got {tuple(batch.shape)}")
        shape = tuple(batch.shape)
        if shape not in self._configs:
            start = time.perf_counter()
            out = self._first_call(batch)
            self.cold_seconds[shape] = time.perf_counter() - start
            return out
        bufs = self._buffers[shape]
        bufs.tensors[INPUT] = batch.permute(0, 2, 3, 1)
        bufs.sum_block.zero_()
        if self.branches:
            self._run_branches(shape, bufs)
            return bufs.logits
        for launch, cfg in zip(self.launches, self._configs[shape]):
            launch(bufs.tensors, bufs.sums, cfg)
        return bufs.logits

    def _run_branches(self, shape: tuple[int, ...], bufs: Buffers) -> None:
        """One stream per resolution level (the first is the caller's): fork after the SE
        sums are zeroed, an event wait for each cross-stream hazard, join at the end."""
        main = torch.cuda.current_stream(self.device)
        if not self._streams:
            own = range(0 if self.lane_priority[0] else 1, LEVELS)
            self._streams = [torch.cuda.Stream(self.device, priority=self.lane_priority[k])
                             for k in own]
            self._events = [torch.cuda.Event() for _ in self.launches]
        if shape not in self._waits:
            self._waits[shape] = hazards(self.plan, bufs)
        streams = self._streams if len(self._streams) == LEVELS else [main, *self._streams]
        lanes = [self.plan.buffers[main_output(la.step)].level for la in self.launches]
        needed = {j for i, deps in enumerate(self._waits[shape]) for j in deps
                  if lanes[j] != lanes[i]}
        waits = pair_waits(self._waits[shape], self._configs[shape])
        for side in self._streams:
            side.wait_stream(main)
        for i, (launch, cfg) in enumerate(zip(self.launches, self._configs[shape])):
            stream = streams[lanes[i]]
            for j in waits[i]:
                if lanes[j] != lanes[i]:
                    stream.wait_event(self._events[j])
            with torch.cuda.stream(stream):
                launch(bufs.tensors, bufs.sums, cfg)
            if i in needed:
                self._events[i].record(stream)
        for side in self._streams:
            main.wait_stream(side)

    def _first_call(self, batch: Tensor) -> Tensor:
        shape = tuple(batch.shape)
        bufs = Buffers(self.plan, shape[0], shape[2], shape[3], self.device)
        bufs.tensors[INPUT] = batch.permute(0, 2, 3, 1)
        bufs.sum_block.zero_()
        if self.tune:  # CUDA: every candidate compiled on all cores, then timed one by one
            self.precompiled[shape] = self._precompile(self.candidate_calls(bufs), self.direct)
        chosen: list[Config] = []
        timed: list[list[tuple[float, Config]]] = []
        for i, launch in enumerate(self.launches):
            chosen.append(self._choose(launch, bufs, timed))
            if i - 1 in self.pairs and (self.tune or self.forced_pair):
                trial = self._choose_pair(i - 1, bufs, chosen, timed)
                self.pair_trials.setdefault(shape, []).append(trial)
        self._buffers[shape], self._configs[shape], self._timed[shape] = bufs, chosen, timed
        return bufs.logits

    def first_call_with(self, batch: Tensor, configs: list[Config]) -> Tensor:
        """The first call of ``batch``'s shape with each step's configuration given (a tuning
        record, :mod:`ttball.kernels.records`) instead of tuned: the given kernels compiled on
        all cores (CUDA), then one call. Raises what a launch raises, the shape then left
        untuned (its next call tunes)."""
        shape = tuple(batch.shape)
        if len(configs) != len(self.launches):
            raise ValueError(f"{len(configs)} configurations for {len(self.launches)} steps")
        start = time.perf_counter()
        bufs = Buffers(self.plan, shape[0], shape[2], shape[3], self.device)
        bufs.tensors[INPUT] = batch.permute(0, 2, 3, 1)
        if self.device.type == "cuda":
            calls = self._triton_calls(bufs, zip(self.launches, configs))
            self.precompiled[shape] = self._precompile(calls, any(c.direct for c in configs))
        bufs.sum_block.zero_()
        for launch, cfg in zip(self.launches, configs):
            launch(bufs.tensors, bufs.sums, cfg)
        self._buffers[shape], self._configs[shape] = bufs, list(configs)
        self._timed[shape] = [[(0.0, cfg)] for cfg in configs]  # nothing for refine to try
        self.cold_seconds[shape] = time.perf_counter() - start
        return bufs.logits

    def has(self, shape: tuple[int, ...]) -> bool:
        """Whether ``shape`` had its first call (tuned or given its configurations)."""
        return shape in self._configs

    def configs(self, shape: tuple[int, ...]) -> list[Config]:
        """The configuration of each step for ``shape`` (after its first call)."""
        return list(self._configs[shape])

    def refine(self, batch: Tensor, time_graph: Callable[[Tensor], float],
               **options: Any) -> Refinement:
        """Re-choose the steps' configurations for ``batch``'s shape by timing the whole CUDA
        graph (:func:`ttball.kernels.refine.refine`; ``options`` go to it). ``time_graph(batch)``
        captures this executor's call as it stands into a CUDA graph and returns the ms of a
        replay (the backend's, which owns the graphs). The shape must have been called once
        (tuned). CUDA only."""
        shape = tuple(batch.shape)
        if shape not in self._configs:
            raise RuntimeError(f"refine: shape {shape} has not been tuned yet")
        if self.device.type != "cuda":
            raise RuntimeError("refine times CUDA graphs: it needs a CUDA device")
        original = list(self._configs[shape])
        sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        bufs = self._buffers[shape]
        extra = [self._grid_limited(launch, cfg, bufs, sms)
                 for launch, cfg in zip(self.launches, original)]
        # every side step on a quarter, then on half of the SMs at once
        starts = [[e[k] if len(e) > k else cfg for e, cfg in zip(extra, original)]
                  for k in range(2) if any(len(e) > k for e in extra)]

        def trial(configs: list[Config]) -> float:
            self._configs[shape] = list(configs)
            return time_graph(batch)

        try:
            configs, report = refine(original, self._timed[shape], trial, name=Config.short,
                                     extra=extra, starts=starts, **options)
        except BaseException:
            self._configs[shape] = original  # not left on a trial's configurations
            raise
        self._configs[shape] = configs
        self(batch)  # leaves the buffers as the chosen configurations compute them
        return report

    def _grid_limited(self, launch: Launch, cfg: Config, bufs: Buffers,
                      sms: int) -> list[Config]:
        """``cfg`` on a quarter and on half of the ``sms`` multiprocessors (a fixed number of
        programs looping over the tiles), for a side branch's conv step (level ≥ 1) run by the
        conv kernel whose grid is larger than that; else nothing."""
        if (not isinstance(launch, ConvLaunch) or cfg.rows or cfg.direct or cfg.programs
                or self.plan.buffers[launch.step.out].level == 0):
            return []
        tiles = -(-launch.out_pixels(bufs.tensors) // cfg.block_m)
        return [replace(cfg, programs=p) for p in (sms // 4, sms // 2) if 0 < p < tiles]

    def _candidates(self, launch: Launch, bufs: Buffers) -> list[Config]:
        candidates = [self.config] if self.config else launch.configs(bufs.tensors)
        return candidates if self.tune else candidates[:1]

    def candidate_calls(self, bufs: Buffers) -> list[TritonCall]:
        """The Triton launch of every candidate the tuner tries for ``bufs``' shape (the CUDA
        kernels' candidates left out)."""
        return self._triton_calls(bufs, ((launch, cfg) for launch in self.launches
                                         for cfg in self._candidates(launch, bufs)))

    @staticmethod
    def _triton_calls(bufs: Buffers, runs: Iterable[tuple[Launch, Config]]) -> list[TritonCall]:
        """The Triton launch of each ``(step's launcher, config)`` for ``bufs``' shape, those
        that run a CUDA kernel (direct or pair) left out."""
        return [launch.triton_call(bufs.tensors, bufs.sums, cfg) for launch, cfg in runs
                if not (isinstance(launch, ConvLaunch) and launch.runs_cuda(cfg))]

    def _precompile(self, calls: list[TritonCall], direct: bool) -> Precompiled:
        """Compile ``calls`` on a thread pool (:mod:`ttball.kernels.precompile`), and build the
        CUDA direct kernels meanwhile if ``direct`` (some of the configurations use them)."""
        jobs = [lambda: direct_library(self.device)] if direct else []
        return precompile(calls, self.device, compile_threads(), jobs)

    def _choose(self, launch: Launch, bufs: Buffers,
                timed_steps: list[list[tuple[float, Config]]]) -> Config:
        """Run the step with the fastest working candidate (its output then is the result);
        append every working candidate's time, fastest first, to ``timed_steps``."""
        candidates = self._candidates(launch, bufs)
        timed: list[tuple[float, Config]] = []
        for cfg in candidates:
            try:
                seconds = self._time(functools.partial(launch, bufs.tensors, bufs.sums, cfg))
            except Exception as exc:  # noqa: BLE001  (a config that can't compile is skipped)
                self.failures.append(f"{_name(launch)} {cfg}: {type(exc).__name__}: {exc}")
                continue
            timed.append((seconds, cfg))
        if not timed:
            raise RuntimeError(f"no working kernel configuration for {_name(launch)}: "
                               + "; ".join(self.failures[-len(candidates):]))
        timed.sort(key=lambda pair: pair[0])
        timed_steps.append(timed)
        best = timed[0][1]
        if self.tune:  # timing ran every candidate several times: run the chosen one again
            step = launch.step
            if isinstance(step, Conv) and step.se_sum:  # the repeated launches added up
                bufs.sums[step.se_sum].zero_()
            launch(bufs.tensors, bufs.sums, best)
        return best

    def _choose_pair(self, i: int, bufs: Buffers, chosen: list[Config],
                     timed: list[list[tuple[float, Config]]]
                     ) -> tuple[int, float, float, str, bool]:
        """After steps ``i`` and ``i + 1`` (a residual block's two convolutions) were tuned and
        run: time the pair kernel's candidates, and take the fastest for both steps if it
        beats their two times by :data:`PAIR_GAIN` (``forced_pair``: take that one). Then the
        second step's output and SE sums are computed again, by whichever runs. Returns
        ``(i, ms of the two steps, ms of the pair, its config, taken)``."""
        first, second = self.launches[i], self.launches[i + 1]
        assert isinstance(first, ConvLaunch) and isinstance(second, ConvLaunch)
        best: tuple[float, Config] | None = None
        for cfg in [self.forced_pair] if self.forced_pair else pair_configs(first.step):
            try:
                ms = self._time(functools.partial(first, bufs.tensors, bufs.sums, cfg))
            except Exception as exc:  # noqa: BLE001  (as in _choose)
                self.failures.append(f"{_name(first)} {cfg}: {type(exc).__name__}: {exc}")
                continue
            if best is None or ms < best[0]:
                best = (ms, cfg)
        separate = timed[i][0][0] + timed[i + 1][0][0]
        if best is not None and (self.forced_pair or best[0] < separate * PAIR_GAIN):
            chosen[i], chosen[i + 1] = best[1], replace(best[1], pair=2)
            timed[i], timed[i + 1] = [best], [(0.0, chosen[i + 1])]  # nothing for refine to try
        se_sum = second.step.se_sum
        if se_sum:  # the timed launches added up
            bufs.sums[se_sum].zero_()
        runner = first if chosen[i].pair else second
        runner(bufs.tensors, bufs.sums, chosen[i] if chosen[i].pair else chosen[i + 1])
        if best is None:
            return i, separate, float("nan"), "", False
        return i, separate, best[0], best[1].short(), bool(chosen[i].pair)

    def _time(self, fn: Callable[[], None]) -> float:
        fn()  # compiles; on CPU (interpreter) this is the only run
        if not self.tune:
            return 0.0
        ms = device_ms(fn, self.device, TUNE_REPS)
        return device_ms(fn, self.device, SHORT_REPS) if ms < SHORT_MS else ms

    def chosen(self, shape: tuple[int, ...]) -> list[tuple[str, Config]]:
        """The configuration each step runs with for ``shape`` (after its first call)."""
        return [(_name(la), cfg) for la, cfg in zip(self.launches, self._configs[shape])]

    def tuned(self, shape: tuple[int, ...]) -> str | None:
        """:meth:`chosen` in one line, ``step=config; …`` (``None`` before the first call)."""
        if shape not in self._configs:
            return None
        return "; ".join(f"{name}={cfg.short()}" for name, cfg in self.chosen(shape))


def _name(launch: Launch) -> str:
    step = launch.step
    return f"conv->{step.out}" if isinstance(step, Conv) else f"tail({step.y})"

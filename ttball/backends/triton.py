"""BlurBall on our own Triton kernels (issue 9): BN folded, FP16 weights, NHWC FP16 activations,
one fused kernel per step of :func:`ttball.kernels.build_plan` (67 steps + 1 memset per call).

``triton-fp16`` captures the whole plan into one CUDA graph per input shape, after a first call
that compiles and tunes each step (:mod:`ttball.kernels.executor`); a caller that passes the
same input buffer again gets graphs that read it in place instead of copying it in
(:class:`~ttball.backends.cudagraph.GraphCache`'s ``by_address``); ``triton-fp16-nograph``
launches the kernels one by one (for profiling; Python launch overhead dominates at batch 1);
``triton-fp16-pdl`` is ``triton-fp16`` with programmatic dependent launch between its kernels
(Hopper and later, :mod:`ttball.kernels.gdc`); ``triton-fp16-tma`` lets the tuner also try
reading each 3×3 stride-1 step's input with tensor-memory-accelerator copies (Hopper and later,
:func:`ttball.kernels.configs.tma_configs`); ``triton-fp16-rows`` lets it also try walking the
16- and 32-channel 3×3 steps down the image a row at a time (:mod:`ttball.kernels.rows`);
``triton-fp16-branches`` runs each resolution's steps on a CUDA stream of its own, waiting
only where the steps share data (:func:`ttball.kernels.buffers.hazards`), so the graph runs
HRNet's parallel branches side by side; ``triton-fp16-direct`` is ``triton-fp16-branches`` whose
tuner also tries a direct convolution in CUDA C++ (halo in shared memory, tensor-core fragments;
:mod:`ttball.kernels.direct`) for the 16- and 32-channel 3×3 steps, transition1's 128 → 16
and the stem's first convolution (read from the FP32 input), one kernel for both convolutions
of a residual block where that measures faster, built at first use with nvcc;
``triton-fp16-branches-refined`` is ``triton-fp16-branches`` whose steps' configurations are
chosen again by timing the whole graph, since side by side the steps compete for the SMs
(:mod:`ttball.kernels.refine`).
Option ``tune=False`` skips the per-shape tuning
and uses each step's default configuration; ``project`` ("tail", "conv" or "off") is
:func:`ttball.kernels.build_plan`'s ``project_terms``: where the fuse outputs' coarse terms
are computed. Each shape's tuned configurations are kept as a tuning record
(:mod:`ttball.kernels.records`) in ``cache_dir/tuning``, else ``$TTBALL_CACHE_DIR/tuning``,
and a later first call of the shape, in this process or another, takes it instead of tuning
(``records=False`` or ``TTBALL_TUNING_RECORDS=0``: tune every time, keep nothing).
Input ``(B, 9, H, W)`` float32 with H, W multiples of 8; output logits float32.
"""

from __future__ import annotations

import importlib.util
import os
import time
from typing import Any

import torch
from torch import Tensor

from ttball.backends._recipe import preset
from ttball.backends.base import register
from ttball.backends.cudagraph import GraphCache, GraphedBackend
from ttball.bench.timing import TimingPlan, time_calls
from ttball.errors import BackendUnavailable, UserError
from ttball.kernels.records import (
    RECORD,
    TuningRecords,
    device_identity,
    record_key,
    records_folder,
    records_wanted,
    tuned_or_recorded,
)
from ttball.kernels.refine import Refinement

_CAPTURE_WARMUP = 1  # eager runs of a tuned shape before capture (all kernels are compiled by then)
# graphs per shape that read a caller's reused buffer in place instead of copying it in
# (GraphCache's by_address): 0.16-0.30 ms of copy a call at batch 64, -1.5 % measured; the
# executor's buffers are per shape, so each costs only the graph
_ADDRESSED_GRAPHS = 4
_TAGS = ("fp16", "folded", "channels_last", "disk-cache")


def triton_missing(device: torch.device) -> str | None:
    reasons = []
    if importlib.util.find_spec("triton") is None:
        reasons.append("triton package not installed")
    if device.type != "cuda":
        reasons.append("needs a CUDA device")
    return "; ".join(reasons) or None


def pdl_missing(device: torch.device) -> str | None:
    """Why ``triton-fp16-pdl`` can't run on ``device`` (None: it can)."""
    reason = triton_missing(device)
    if reason:
        return reason
    from ttball.kernels.gdc import pdl_missing as gdc_missing

    return gdc_missing(device)


def tma_missing(device: torch.device) -> str | None:
    """Why ``triton-fp16-tma`` can't run on ``device`` (None: it can)."""
    reason = triton_missing(device)
    if reason:
        return reason
    if importlib.util.find_spec("triton.tools.tensor_descriptor") is None:
        return "this Triton has no triton.tools.tensor_descriptor"
    if torch.cuda.get_device_capability(device) < (9, 0):
        return "TMA needs compute capability 9.0 or later"
    return None


def direct_missing(device: torch.device) -> str | None:
    """Why ``triton-fp16-direct`` can't run on ``device`` (None: it can)."""
    reason = triton_missing(device)
    if reason:
        return reason
    from ttball.kernels.direct import direct_missing as kernel_missing

    return kernel_missing(device)


class TritonBackend(GraphedBackend):
    """The plan's Triton executor, optionally replayed from one CUDA graph per input shape."""

    def __init__(
        self, model: torch.nn.Module, device: torch.device, graph: bool = True,
        tune: bool = True, pdl: bool = False, tma: bool = False, rows: bool = False,
        branches: bool = False, direct: bool = False, refine: bool = False,
        project: str = "tail", cache_dir: str | os.PathLike[str] | None = None,
        records: bool = True,
    ) -> None:
        super().__init__(device)
        if project not in ("tail", "conv", "off"):
            raise UserError(f"triton option project: 'tail', 'conv' or 'off', got {project!r}")
        reason = triton_missing(device)
        if reason is None and pdl:
            reason = pdl_missing(device)
        if reason is None and tma:
            reason = tma_missing(device)
        if reason is None and direct:
            reason = direct_missing(device)
        if reason:
            raise BackendUnavailable(f"triton backend: {reason}")
        from ttball.kernels import build_plan
        from ttball.kernels.executor import TritonExecutor

        self.precision = "fp16"
        self.plan = build_plan(model, project_terms=project)
        self.executor = TritonExecutor(self.plan, device, tune=tune, pdl=bool(pdl),
                                       tma=bool(tma), rows=bool(rows), branches=bool(branches),
                                       direct=bool(direct))
        self.graph = graph
        # refine: after tuning a shape, re-choose the steps' configurations by timing the
        # whole graph (ttball.kernels.refine); what it did, per shape
        self.refine = bool(refine) and graph and tune
        self.refinements: dict[tuple[int, ...], Refinement] = {}
        self._graphs = GraphCache(self.executor, device, _CAPTURE_WARMUP,
                                  by_address=_ADDRESSED_GRAPHS)
        # records: the tuner's choices kept on disk (ttball.kernels.records), in
        # cache_dir/tuning or $TTBALL_CACHE_DIR/tuning; per shape, whether its first call
        # tuned or took a record, and why not a record
        self.records = (TuningRecords(records_folder(cache_dir))
                        if records and records_wanted() and self.executor.tune else None)
        from ttball.kernels.direct import candidate_id, next_chosen, taps_offered

        self._variant = {"pdl": bool(pdl), "tma": bool(tma), "rows": bool(rows),
                         "branches": bool(branches), "direct": bool(direct),
                         "refine": self.refine, "project": project,
                         "taps": bool(direct) and taps_offered(),
                         "next": ",".join(sorted(candidate_id(*key) for key in next_chosen()))
                         if direct else ""}
        self.tuning: dict[tuple[int, ...], tuple[str, str | None]] = {}

    def _check(self, batch: Tensor) -> Tensor:
        if batch.shape[2] % 8 or batch.shape[3] % 8:
            raise UserError(f"{self.name}: height and width must be multiples of 8, got "
                            f"{tuple(batch.shape[2:])}")
        return batch.float().contiguous()

    def tuned(self, shape: tuple[int, ...]) -> str | None:
        """Each step's tuned configuration for input ``shape`` (``ttball bench``'s ``tuned``),
        after what ``refine`` did, if it ran."""
        steps = self.executor.tuned(shape)
        if steps is not None and self.tuning.get(shape, ("",))[0] == RECORD:
            return f"from a tuning record: {steps}"
        if steps is None or shape not in self.refinements:
            return steps
        return f"refine: {self.refinements[shape].summary()}; {steps}"

    def run(self, batch: Tensor) -> Tensor:
        batch = self._check(batch)
        if not self.graph:
            return self.executor(batch).clone()
        shape = tuple(batch.shape)
        if shape not in self._graphs:
            if self.executor.has(shape):
                self.executor(batch)
            elif self.records is None:
                self._tune(batch)
            else:
                self.tuning[shape] = self._tune_or_record(batch)
        return self._graphs(batch)

    def _tune(self, batch: Tensor) -> list[Any]:
        """The shape's first call, on the current stream: compiles and tunes (and refines)."""
        shape = tuple(batch.shape)
        self.executor(batch)
        if self.refine:  # an optimization: its failure leaves the tuner's choice
            try:
                self.refinements[shape] = self.executor.refine(batch, self._replay_ms)
            except Exception as exc:  # noqa: BLE001  (capture or timing errors vary)
                self.refinements[shape] = Refinement(
                    float("nan"), float("nan"), skipped=f"failed: {type(exc).__name__}: {exc}")
        return self.executor.configs(shape)

    def _tune_or_record(self, batch: Tensor) -> tuple[str, str | None]:
        """The shape's first call with its tuning record (``cache_dir``), else tuned and
        recorded: one process at a time per record (:func:`tuned_or_recorded`)."""
        assert self.records is not None
        shape = tuple(batch.shape)
        identity = device_identity(self.device)
        key = record_key(self.plan, shape, self._variant, identity)
        about = {"backend": self.name, "shape": list(shape), "variant": self._variant,
                 **identity}
        return tuned_or_recorded(self.records, key, len(self.executor.launches),
                                 lambda configs: self.executor.first_call_with(batch, configs),
                                 lambda: self._tune(batch), about)

    def _replay_ms(self, batch: Tensor) -> float:
        """Median ms of a replay of the executor's call as it stands, from a CUDA graph
        captured now and dropped after (``refine``'s clock): 5 groups of replays of about
        5 ms each."""
        graph, _, _ = GraphCache(self.executor, self.device, _CAPTURE_WARMUP).capture(batch)
        graph.replay()
        torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize(self.device)
        calls = max(5, min(50, int(0.005 / max(time.perf_counter() - start, 1e-6))))
        return time_calls(graph.replay, self.device, TimingPlan(2, 5, calls))["median_ms"]


OPTIONS = ("graph", "tune", "pdl", "tma", "rows", "branches", "direct", "refine", "project",
           "cache_dir", "records")
"""What every ``triton-*`` entry takes: :class:`TritonBackend`'s keywords."""

# (name, description, requirement, fixed options): every variant is TritonBackend with some
# options fixed; giving one of them differently is an error (``preset``).
_VARIANTS = (
    ("triton-fp16",
     ("own Triton kernels (fused implicit-GEMM convs), BN folded, FP16, NHWC, one CUDA graph "
      "per shape; option tune"),
     triton_missing, {"graph": True}),
    ("triton-fp16-nograph",
     "own Triton kernels, BN folded, FP16, NHWC, launched one by one; option tune",
     triton_missing, {"graph": False}),
    ("triton-fp16-pdl",
     ("triton-fp16 with programmatic dependent launch between its kernels (sm_90+); "
      "option tune"),
     pdl_missing, {"graph": True, "pdl": True}),
    ("triton-fp16-tma",
     ("triton-fp16 whose tuner also tries TMA copies for the 3x3 stride-1 steps' inputs "
      "(sm_90+); option tune"),
     tma_missing, {"graph": True, "tma": True}),
    ("triton-fp16-rows",
     ("triton-fp16 whose tuner also tries a row-walking kernel for the 16- and 32-channel 3x3 "
      "steps; option tune"),
     triton_missing, {"graph": True, "rows": True}),
    ("triton-fp16-branches",
     ("triton-fp16 with each resolution's steps on a CUDA stream of its own, so HRNet's "
      "branches run side by side in the graph; options tune, pdl"),
     triton_missing, {"graph": True, "branches": True}),
    ("triton-fp16-direct",
     ("triton-fp16-branches whose tuner also tries a direct 3x3 convolution in CUDA C++ (halo "
      "in shared memory) for the 16/32-channel steps, 128->16 and the input's 9->64, and one "
      "kernel for both convolutions of a residual block; built with nvcc at first use; "
      "option tune"),
     direct_missing, {"graph": True, "branches": True, "direct": True}),
    ("triton-fp16-branches-refined",
     ("triton-fp16-branches whose steps' configurations are chosen again by timing the whole "
      "CUDA graph after the per-step tuning (branches compete for the SMs), side-branch steps "
      "also on part of the SMs; option tune"),
     triton_missing, {"graph": True, "branches": True, "refine": True}),
)
for _name, _description, _requires, _fixed in _VARIANTS:
    register(_name, description=_description, requires=_requires, tags=_TAGS, options=OPTIONS,
             pinned=_fixed)(
        preset(TritonBackend, **_fixed)
    )

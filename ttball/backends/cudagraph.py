"""The eager network captured into one plain CUDA graph per batch size: launch overhead
removed, no fusion (the H200 baseline's "eager FP16 weights + one manual CUDA graph").

Each batch size gets a static input buffer ``(B, 9, H, W)`` float32 and a graph captured on its
first call (after three warm-up runs on a side stream, as the CUDA-graph docs require). A call
copies the batch into the buffer, replays, and returns a clone of the static output, so results
stay valid after the next replay. The graphs share one memory pool; replays are serialised on
the current stream, so they never overlap. CUDA only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ttball.backends._recipe import (
    Recipe,
    autocast_context,
    cudnn_benchmark,
    prepare_input,
    prepare_model,
    register_recipes,
)
from ttball.backends.base import BackendBase, capture_graph, needs_cuda
from ttball.errors import BackendUnavailable
from ttball.kernels import copies

_CAPTURE_WARMUP = 3  # side-stream runs before capture (lazy cuDNN/cuBLAS init must not be captured)


class GraphCache:
    """``fn`` replayed from one CUDA graph per input shape, captured on the shape's first call
    after ``warmup`` runs on a side stream. A call copies the batch into the shape's static
    input, replays and returns a clone of the static output. ``share_pool``: every graph
    allocates from the first one's memory pool (safe because replays never overlap).

    ``by_address`` > 0: a caller that passes a batch at the same device address again (the
    same buffer refilled, as ``ttball bench`` and the worker's pipeline do) gets, from the
    second such call on, a graph captured reading that address directly, so the copy into the
    static input goes. Up to ``by_address`` such graphs per shape; other addresses keep the
    copying graph. Only for an ``fn`` whose intermediates do not grow with the number of
    graphs (the Triton executor writes into its own per-shape buffers). Correct for any
    tensor later found at that address: the graph reads whatever the address holds when it
    replays, which is then the caller's batch.

    The copies in and out are :mod:`ttball.kernels.copies`' (memcpys, or kernels with
    ``TTBALL_KERNEL_COPIES=1``).

    ``frozen`` (set by callers that push from several threads once they are warm): no new
    captures; a shape or address without a graph runs ``fn`` directly (counted in
    ``uncaptured``). A capture while another thread of the process launches work, syncs or
    copies fails (CUDA errors 901 and 905 in the twenty-first session's lanes, with CUDA's
    global and thread-local capture modes alike), so graphs are captured before threads
    start."""

    _SEEN_MAX = 64  # addresses remembered for their first call, oldest forgotten first

    def __init__(self, fn: Callable[[Tensor], Tensor], device: torch.device, warmup: int,
                 share_pool: bool = False, by_address: int = 0) -> None:
        self.fn, self.device, self.warmup, self.share_pool = fn, device, warmup, share_pool
        self.by_address = by_address
        self._graphs: dict[tuple[int, ...], tuple[Any, Tensor, Tensor]] = {}
        # (shape, strides, dtype, address) -> (graph, static output)
        self._addressed: dict[tuple[Any, ...], tuple[Any, Tensor]] = {}
        self._seen: OrderedDict[tuple[Any, ...], None] = OrderedDict()
        self._pool: Any = None
        self.frozen = False
        self.uncaptured = 0
        # called on the calling thread with "copy_in" once the batch is in the graph's input
        # (at once for a graph that reads it in place) and "graph" once the replay is queued:
        # a caller's timing events around the steps (GpuPipeline's gpu_net_* stages)
        self.marker: Callable[[str], None] | None = None

    def __contains__(self, shape: tuple[int, ...]) -> bool:
        return shape in self._graphs

    def addressed(self, shape: tuple[int, ...]) -> int:
        """How many graphs read a caller's address directly for ``shape``."""
        return sum(key[0] == shape for key in self._addressed)

    def capture(self, batch: Tensor, copy: bool = True) -> tuple[Any, Tensor, Tensor]:
        """A new graph of ``fn`` for ``batch``'s shape, with its static input and output (not
        kept: the cache's own graphs are captured here on a shape's first call). ``copy``
        False: the graph reads ``batch`` itself, whose storage is then its static input."""
        static_in = batch.detach().clone().contiguous() if copy else batch.detach()
        graph, static_out = capture_graph(lambda: self.fn(static_in), self.device, self.warmup,
                                          self._pool)
        if self.share_pool:
            self._pool = graph.pool()
        return graph, static_in, static_out

    def __call__(self, batch: Tensor) -> Tensor:
        shape = tuple(batch.shape)
        if self.by_address:
            key = (shape, tuple(batch.stride()), batch.dtype, batch.data_ptr())
            hit = self._addressed.get(key)
            if hit is None and not self.frozen and self._repeated(key) \
                    and shape in self._graphs and self.addressed(shape) < self.by_address:
                graph, _, out = self.capture(batch, copy=False)
                hit = self._addressed[key] = (graph, out)
            if hit is not None:
                self._mark("copy_in")
                hit[0].replay()
                self._mark("graph")
                return copies.clone(hit[1])
        if shape not in self._graphs:
            if self.frozen:
                self.uncaptured += 1
                return copies.clone(self.fn(batch))
            self._graphs[shape] = self.capture(batch)
        graph, static_in, static_out = self._graphs[shape]
        copies.copy_into(static_in, batch)
        self._mark("copy_in")
        graph.replay()
        self._mark("graph")
        return copies.clone(static_out)

    def _mark(self, step: str) -> None:
        if self.marker is not None:
            self.marker(step)

    def _repeated(self, key: tuple[Any, ...]) -> bool:
        """Whether ``key`` was seen before (and remember it now)."""
        if key in self._seen:
            del self._seen[key]
            return True
        self._seen[key] = None
        if len(self._seen) > self._SEEN_MAX:
            self._seen.popitem(last=False)
        return False


class GraphedBackend(BackendBase):
    """A backend that replays its calls from a :class:`GraphCache` (``self._graphs``): the
    cache's freezing for callers on several threads. Its outputs are the cache's clones (or a
    subclass's own: ``fresh_outputs``)."""

    _graphs: GraphCache
    fresh_outputs = True

    def freeze_graphs(self) -> None:
        """No captures from now on (see :class:`GraphCache`'s ``frozen``)."""
        self._graphs.frozen = True

    def set_marker(self, marker: Callable[[str], None] | None) -> None:
        """``marker(step)`` at each replayed call's steps (see :class:`GraphCache`'s
        ``marker``); None: no more."""
        self._graphs.marker = marker

    @property
    def uncaptured_calls(self) -> int:
        """Calls run without a graph since :meth:`freeze_graphs`."""
        return self._graphs.uncaptured


class CudaGraphBackend(GraphedBackend):
    """The eager network prepared by ``recipe``, replayed from a CUDA graph per batch shape."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        recipe: Recipe | None = None,
        **options: Any,
    ) -> None:
        super().__init__(device)
        if device.type != "cuda":
            raise BackendUnavailable("CUDA graphs need a CUDA device")
        recipe = Recipe.from_options(options, "cudagraph", recipe=recipe)
        self.recipe, self.precision = recipe, recipe.precision
        self.model = prepare_model(model, device, recipe)
        self._graphs = GraphCache(self._forward, device, _CAPTURE_WARMUP, share_pool=True)

    def _forward(self, x: Tensor) -> Tensor:
        with autocast_context(self.recipe, self.device, cache_enabled=False):
            return self.model(prepare_input(x, self.recipe))[0].float()

    def run(self, batch: Tensor) -> Tensor:
        with cudnn_benchmark(self.recipe.cudnn_benchmark):
            return self._graphs(batch)


register_recipes(
    "cudagraph",
    CudaGraphBackend,
    [Recipe("fp32"), Recipe("fp16"), Recipe("fp16", fold=True, channels_last=True)],
    "eager network in one manual CUDA graph per batch size",
    requires=needs_cuda,
)

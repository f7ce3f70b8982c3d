"""``GraphCache``: one CUDA graph per input shape, and with ``by_address`` graphs that read a
caller's reused buffer in place (no copy into a static input).

The cache's bookkeeping is checked on the CPU with a stand-in graph that replays ``fn``
eagerly from whatever its static input holds, as a CUDA graph reads its captured address;
the real graphs (and the Triton backend that uses them) on a GPU.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import Tensor

from ttball.backends import create, unavailable_reason
from ttball.backends.cudagraph import GraphCache
from ttball.model import BlurBall, randomize_batchnorm

CUDA = torch.cuda.is_available()


def _fn(x: Tensor) -> Tensor:
    return x * 2 + 1


class _Replay:
    """A stand-in for a captured graph: ``fn`` of the tensor it was captured reading, into
    the static output."""

    def __init__(self, fn: Any, static_in: Tensor, static_out: Tensor) -> None:
        self.fn, self.static_in, self.static_out = fn, static_in, static_out

    def replay(self) -> None:
        self.static_out.copy_(self.fn(self.static_in))


class _CpuCache(GraphCache):
    def __init__(self, by_address: int) -> None:
        super().__init__(_fn, torch.device("cpu"), warmup=0, by_address=by_address)
        self.captured: list[bool] = []  # copy flag of each capture

    def capture(self, batch: Tensor, copy: bool = True) -> tuple[Any, Tensor, Tensor]:
        static_in = batch.clone() if copy else batch
        static_out = torch.empty_like(batch)
        self.captured.append(copy)
        return _Replay(self.fn, static_in, static_out), static_in, static_out


def test_a_refilled_buffer_is_read_in_place_from_its_second_call() -> None:
    cache, buf = _CpuCache(by_address=2), torch.empty(2, 3)
    for i in range(4):
        buf.copy_(torch.full((2, 3), float(i)))
        out = cache(buf)
        assert torch.equal(out, _fn(buf))
    # the shape's copying graph on the first call, the in-place one on the second
    assert cache.captured == [True, False]
    assert cache.addressed((2, 3)) == 1


def test_results_stay_valid_after_the_next_call() -> None:
    cache, buf = _CpuCache(by_address=2), torch.zeros(4)
    results = []
    for i in range(3):
        buf.fill_(float(i))
        results.append(cache(buf))
    assert [r[0].item() for r in results] == [1.0, 3.0, 5.0]


def test_new_tensors_each_call_keep_the_copying_graph() -> None:
    cache = _CpuCache(by_address=2)
    kept = [torch.randn(3, 5) for _ in range(5)]  # alive together: five addresses
    for x in kept:
        assert torch.equal(cache(x), _fn(x))
    assert cache.captured == [True]
    assert cache.addressed((3, 5)) == 0


def test_at_most_by_address_in_place_graphs_per_shape() -> None:
    cache = _CpuCache(by_address=2)
    bufs = [torch.randn(2, 2) for _ in range(3)]
    for _ in range(3):
        for b in bufs:
            assert torch.equal(cache(b), _fn(b))
    assert cache.captured == [True, False, False]  # the third buffer goes on copying
    assert cache.addressed((2, 2)) == 2
    other = torch.randn(4, 2)  # another shape has a budget of its own
    cache(other), cache(other)
    assert cache.addressed((4, 2)) == 1


def test_the_same_address_with_other_strides_is_another_graph() -> None:
    cache, buf = _CpuCache(by_address=4), torch.randn(4, 4)
    cache(buf), cache(buf)
    t = buf.t()  # same address and shape, transposed
    assert torch.equal(cache(t), _fn(t))
    assert torch.equal(cache(t), _fn(t))
    assert cache.captured == [True, False, False]


def test_off_by_default() -> None:
    cache, buf = _CpuCache(by_address=0), torch.randn(3)
    for _ in range(3):
        assert torch.equal(cache(buf), _fn(buf))
    assert cache.captured == [True]


def test_first_calls_are_forgotten_oldest_first() -> None:
    cache = _CpuCache(by_address=1)
    first = torch.randn(2)
    cache(first)
    others = [torch.randn(2) for _ in range(GraphCache._SEEN_MAX)]
    for x in others:
        cache(x)
    cache(first)  # forgotten: counts as a first call again
    assert cache.captured == [True]
    cache(first)
    assert cache.captured == [True, False]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_graphs_read_a_reused_buffer_in_place() -> None:
    dev = torch.device("cuda")
    cache = GraphCache(_fn, dev, warmup=1, by_address=2)
    buf = torch.empty(64, device=dev)
    results = []
    for i in range(4):
        buf.copy_(torch.arange(64, device=dev) * i)
        results.append(cache(buf))
    for i, out in enumerate(results):
        assert torch.equal(out, _fn(torch.arange(64, device=dev) * i))
    assert cache.addressed((64,)) == 1
    # a new tensor at a freed address of the same shape: the in-place graph reads it
    del buf
    torch.cuda.synchronize()
    again = torch.full((64,), 7.0, device=dev)
    assert torch.equal(cache(again), _fn(again))


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["triton-fp16", "triton-fp16-direct"])
def test_triton_backend_reads_a_reused_buffer_in_place(name: str) -> None:
    reason = unavailable_reason(name, "cuda")
    if reason:
        pytest.skip(f"{name} unavailable on cuda: {reason}")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = randomize_batchnorm(BlurBall(), seed=0).eval()
    backend = create(name, copy.deepcopy(model), "cuda", tune=False)
    gen = torch.Generator().manual_seed(1)
    inputs = [torch.randn(2, 9, 72, 128, generator=gen).cuda() for _ in range(3)]
    # fresh tensors (the allocator may hand a freed clone's address to the next one)
    expected = [backend(x.clone()) for x in inputs]
    before = backend._graphs.addressed((2, 9, 72, 128))
    buf = torch.empty_like(inputs[0])
    for _ in range(2):
        for i, x in enumerate(inputs):
            buf.copy_(x)
            got = backend(buf)
            # not bit-exact: the SE sums are float atomics, added in any order
            for j, want in enumerate(expected):
                close = torch.allclose(got, want, rtol=1e-3, atol=1e-3)
                assert close == (i == j), (i, j, (got - want).abs().max().item())
    assert backend._graphs.addressed((2, 9, 72, 128)) == before + 1  # buf's


def test_frozen_cache_runs_new_shapes_and_addresses_without_capturing() -> None:
    cache, buf = _CpuCache(by_address=2), torch.randn(2, 3)
    cache(buf)
    cache.frozen = True
    for _ in range(2):  # a repeated address: no graph reading it in place
        assert torch.equal(cache(buf), _fn(buf))
    other = torch.randn(5)  # a new shape: run directly
    assert torch.equal(cache(other), _fn(other))
    assert cache.captured == [True]
    assert cache.uncaptured == 1


def test_graphed_backends_freeze_their_cache_and_count_what_ran_without_a_graph() -> None:
    """``freeze_graphs`` / ``uncaptured_calls`` of the CUDA-graph and Triton backends reach
    their cache (checked without building one: CUDA only); other backends have none."""
    from ttball.backends.base import BackendBase
    from ttball.backends.cudagraph import CudaGraphBackend, GraphedBackend
    from ttball.backends.triton import TritonBackend

    assert issubclass(CudaGraphBackend, GraphedBackend)
    assert issubclass(TritonBackend, GraphedBackend)
    backend = GraphedBackend.__new__(GraphedBackend)
    backend._graphs = _CpuCache(by_address=0)
    backend.freeze_graphs()
    x = torch.randn(3)
    assert torch.equal(backend._graphs(x), _fn(x))
    assert backend.uncaptured_calls == 1
    plain = BackendBase(torch.device("cpu"))
    plain.freeze_graphs()
    assert plain.uncaptured_calls == 0

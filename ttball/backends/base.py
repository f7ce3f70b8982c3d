"""The backend protocol and the one registry that ``track``, ``serve``, ``bench`` and ``verify`` share.

A backend wraps the one :class:`~ttball.model.BlurBall` definition and runs it some way (eager,
folded, compiled, ONNX Runtime, ...). It takes a normalised batch ``(B, 9, H, W)`` float32 on
any device and returns logits ``(B, 3, H, W)`` float32 on its own device.

Registering::

    @register("eager-fp32", description="PyTorch eager, FP32")
    def _eager_fp32(model, device):
        return EagerBackend(model, device)

    @register("onnxrt-fp32", description="ONNX Runtime CPU", options=("cache_dir", ...))
    def _onnxrt_fp32(model, device, **options):
        return OnnxRuntimeBackend(model, device, **options)

A backend that can't run here is listed with the reason (``requires`` returns a string).

Options: an entry declares the keyword options it uses (``register(..., options=...)``; none by
default; an entry tagged ``disk-cache`` also takes ``cache_dir``, which :func:`cache_options`
gives it). A variant fixes some (``pinned=``: ``eager-fp16``'s precision): they are taken only
with their own values, and not offered. :func:`create` refuses any other option, or a pinned
one with another value, with one :class:`~ttball.errors.UserError` (``backend NAME takes no
option X; it takes: A, B``, or ``it takes none``) before it checks the device or builds
anything: a misspelt option is the caller's mistake on every machine, and ignoring it would
time or ship something other than what was asked for.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from ttball.errors import BackendUnavailable, UserError
from ttball.model.config import WeightsConfig


@runtime_checkable
class Backend(Protocol):
    """What every backend offers. ``warmed`` holds the batch sizes it has already run."""

    name: str
    device: torch.device
    warmed: set[int]

    def __call__(self, batch: Tensor) -> Tensor:
        """``(B, 9, H, W)`` float32 → logits ``(B, 3, H, W)`` float32 on ``self.device``."""
        ...

    def warmup(self, batch_sizes: Iterable[int], height: int, width: int) -> dict[int, float]:
        """Run each batch size once (compiling where the backend compiles); seconds per size."""
        ...


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def capture_graph(work: Callable[[], Any], device: torch.device, warmup: int = 1,
                  pool: Any = None, capture_error_mode: str = "global"
                  ) -> tuple[torch.cuda.CUDAGraph, Any]:
    """``work`` run ``warmup`` times on a side stream (its kernels loaded, cuBLAS and the
    allocator set up), then captured in a CUDA graph (in memory ``pool`` when given); returns
    the graph and what the captured call returned (its static outputs)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            work()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, capture_error_mode=capture_error_mode):
        out = work()
    return graph, out


class BackendBase:
    """Shared plumbing: moving the batch in, warm-up bookkeeping. Subclasses implement ``run``.

    ``fresh_outputs``: each call returns a tensor of its own that no later call writes (a
    caller that keeps outputs across calls needs no copy of its own); False unless a subclass
    says so (a CUDA-graph backend of torch.compile reuses its output buffers)."""

    name = "base"
    fresh_outputs = False

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.warmed: set[int] = set()

    def run(self, batch: Tensor) -> Tensor:
        raise NotImplementedError

    @torch.inference_mode()
    def __call__(self, batch: Tensor) -> Tensor:
        if batch.dim() != 4 or batch.shape[1] != 9:
            raise UserError(f"{self.name}: expected a (B, 9, H, W) batch, got {tuple(batch.shape)}")
        if not batch.is_floating_point():  # un-normalised uint8 pixels ran and gave nonsense
            raise UserError(f"{self.name}: expected a preprocessed float batch (ttball.frames."
                            f"preprocess), got {batch.dtype}")
        out = self.run(batch.to(self.device, non_blocking=True))
        self.warmed.add(batch.shape[0])
        return out.float()

    def freeze_graphs(self) -> None:
        """Capture no more CUDA graphs (a backend that has them overrides this); for callers
        about to call from several threads."""

    @property
    def uncaptured_calls(self) -> int:
        """Calls run without a CUDA graph since :meth:`freeze_graphs` (none here)."""
        return 0

    def warmup(self, batch_sizes: Iterable[int], height: int, width: int) -> dict[int, float]:
        seconds = {}
        gen = torch.Generator().manual_seed(0)
        for b in batch_sizes:
            x = random_windows(b, height, width, self.device, gen)
            start = time.perf_counter()
            self(x)
            synchronize(self.device)
            seconds[b] = time.perf_counter() - start
        return seconds


def random_windows(batch: int, height: int, width: int, device: torch.device | str,
                   generator: torch.Generator | None = None) -> Tensor:
    """``(batch, 9, height, width)`` standard-normal windows on ``device``, drawn on the CPU
    (from ``generator``, default seed 0): the CUDA generator is shared by every thread, and
    drawing from it while another thread captures a CUDA graph fails ("Offset increment
    outside graph capture")."""
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    return torch.randn(batch, 9, height, width, generator=gen).to(device)


Factory = Callable[..., Backend]
Requirement = Callable[[torch.device], "str | None"]


@dataclass(frozen=True)
class BackendSpec:
    """A registry entry. ``requires(device)`` returns why it can't run there, or None;
    ``options``: the keyword options its factory uses; ``pinned``: those a variant fixes,
    taken only with their fixed values (:func:`~ttball.backends._recipe.preset`)."""

    name: str
    factory: Factory
    description: str
    requires: Requirement
    tags: frozenset[str] = field(default_factory=frozenset)
    options: frozenset[str] = field(default_factory=frozenset)
    pinned: Mapping[str, Any] = field(default_factory=dict)

    @property
    def accepts(self) -> frozenset[str]:
        """What :func:`create` takes: the declared and pinned options, and ``cache_dir``
        where the ``disk-cache`` tag says :func:`cache_options` gives it."""
        return self.takes | set(self.pinned)

    @property
    def takes(self) -> frozenset[str]:
        """The options a caller can choose (what errors and ``bench --list`` name)."""
        return (self.options - set(self.pinned)) | (
            {"cache_dir"} if "disk-cache" in self.tags else set())


_REGISTRY: dict[str, BackendSpec] = {}


def _always(device: torch.device) -> str | None:
    return None


def register(
    name: str,
    *,
    description: str,
    requires: Requirement = _always,
    tags: Iterable[str] = (),
    options: Iterable[str] = (),
    pinned: Mapping[str, Any] | None = None,
) -> Callable[[Factory], Factory]:
    """Add a backend factory under ``name``, called with the ``options`` it declares (any
    other is refused before it runs); a second registration of a name is an error."""

    def wrap(factory: Factory) -> Factory:
        if name in _REGISTRY:
            raise ValueError(f"backend {name!r} is already registered")
        _REGISTRY[name] = BackendSpec(name, factory, description, requires, frozenset(tags),
                                      frozenset(options), dict(pinned or {}))
        return factory

    return wrap


def _load_all() -> None:
    from ttball import backends  # noqa: F401  (importing the package registers every backend)


def names() -> list[str]:
    _load_all()
    return list(_REGISTRY)


def spec(name: str) -> BackendSpec:
    _load_all()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UserError(
            f"unknown backend {name!r}; known: {', '.join(_REGISTRY)}"
        ) from None


def config_of(backend: Backend) -> WeightsConfig:
    """The weights' configuration a backend's model carries (default geometry otherwise)."""
    model = getattr(backend, "model", None)
    return getattr(model, "config", None) or WeightsConfig()


def parse_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device`` (``auto`` → CUDA when present, else CPU), whether or not
    this machine has it; a ``UserError`` for a name torch does not know."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"unknown device {device!r}; use auto, cpu or cuda") from None


def resolve_device(device: str | torch.device) -> torch.device:
    """``auto`` → CUDA when present, else CPU. An explicit ``cuda`` without a GPU is an error."""
    dev = parse_device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError("device cuda requested but no CUDA GPU is available on this machine")
    return dev


def unavailable_reason(name: str, device: str | torch.device) -> str | None:
    return spec(name).requires(parse_device(device))


def refuse_unknown(backend: str, given: Iterable[str], accepts: Iterable[str],
                   takes: Iterable[str] | None = None) -> None:
    """The one error for options ``backend`` does not use (those of ``given`` not in
    ``accepts``): a :class:`UserError` naming them and what it ``takes`` (default: all it
    accepts; a variant's pinned options are accepted but not offered)."""
    unknown = sorted(set(given) - set(accepts))
    if not unknown:
        return
    offered = sorted(accepts if takes is None else takes)
    what = f"it takes: {', '.join(offered)}" if offered else "it takes none"
    plural = "s" if len(unknown) > 1 else ""
    raise UserError(f"backend {backend} takes no option{plural} {', '.join(unknown)}; {what}")


def refuse_clash(given: Mapping[str, Any], pinned: Mapping[str, Any]) -> None:
    """A :class:`UserError` if ``given`` sets an option a variant fixes (``pinned``) to another
    value: it would be overridden silently."""
    clash = {k: v for k, v in given.items() if k in pinned and pinned[k] != v}
    if clash:
        own = {k: pinned[k] for k in clash}
        raise UserError(f"options {clash} contradict this variant's fixed {own}; use the "
                        "generic entry or another variant")


def create(
    name: str, model: torch.nn.Module, device: str | torch.device = "cpu", **options: Any
) -> Backend:
    """Build backend ``name`` around ``model`` on ``device``; explains why if it can't run here.
    An option the entry does not take, or a fixed one with another value, is refused first,
    whatever the device (nothing built)."""
    entry = spec(name)
    refuse_unknown(name, options, entry.accepts, entry.takes)
    refuse_clash(options, entry.pinned)
    options = {k: v for k, v in options.items() if k not in entry.pinned}  # the variant's own
    dev = resolve_device(device)
    reason = entry.requires(dev)
    if reason:
        raise BackendUnavailable(f"backend {name} is unavailable on {dev}: {reason}")
    backend = entry.factory(model, dev, **options)
    backend.name = name
    return backend


def cache_options(name: str, cache_dir: str | os.PathLike[str] | None) -> dict[str, Any]:
    """``{"cache_dir": cache_dir}`` for a backend tagged ``disk-cache`` (its compile, engines or
    tuning records kept there), else nothing: what ``serve --compile-cache`` and ``--backend
    auto``'s trials under it pass to :func:`create`."""
    if cache_dir is None or "disk-cache" not in spec(name).tags:
        return {}
    return {"cache_dir": str(cache_dir)}


def describe(device: str | torch.device) -> list[dict[str, Any]]:
    """Every registered backend with whether it can run on ``device`` and, if not, why, and the
    options :func:`create` passes it."""
    dev = parse_device(device)
    rows = []
    for name in names():
        entry = _REGISTRY[name]
        reason = entry.requires(dev)
        rows.append(
            {"name": name, "description": entry.description, "available": reason is None,
             "reason": reason or "", "tags": sorted(entry.tags), "options": sorted(entry.takes)}
        )
    return rows


def needs_cuda(device: torch.device) -> str | None:
    if device.type != "cuda":
        return "needs a CUDA device"
    return None

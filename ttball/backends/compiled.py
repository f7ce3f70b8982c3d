"""``torch.compile`` of the one network, per mode and recipe, with an on-disk compile cache.

Registered combinations are named ``compile-<mode>-<recipe>`` (``compile-default-fp32``,
``compile-reduce-overhead-fp16-folded-cl``, ...); the generic ``compile`` entry takes any
combination as options::

    create("compile", model, "cuda", mode="max-autotune", precision="fp16", fold=True,
           channels_last=True, cache_dir="~/.cache/ttball")

Each batch size is compiled on its first call (``dynamic=False``: one specialised graph per
size, as the H200 baseline measured). The input cast and the FP32 output conversion are inside
the compiled graph. With ``cache_dir`` the compile runs with ``TORCHINDUCTOR_CACHE_DIR`` and
``TRITON_CACHE_DIR`` there, and the mega-cache (``torch.compiler.save_cache_artifacts()``) is
written to ``cache_dir/megacache.bin`` after each new compile and loaded before the first, so a
restarted process (or another machine with the same GPU and versions) compiles warm. The file
holds every artifact this process has compiled so far: the public API has no per-model scope.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ttball.backends._recipe import (
    RECIPE_OPTIONS,
    Recipe,
    autocast_context,
    cudnn_benchmark,
    prepare_input,
    prepare_model,
    register_recipes,
)
from ttball.backends.base import BackendBase, Requirement, needs_cuda, register
from ttball.cachedir import PARTS, part_path
from ttball.errors import BackendUnavailable, UserError
from ttball.results import atomic_write

log = logging.getLogger(__name__)

# mode -> whether it needs CUDA. reduce-overhead and max-autotune capture CUDA graphs;
# max-autotune(-no-cudagraphs) autotunes Triton/cuDNN GPU kernels, which CPU inductor lacks.
MODES: dict[str, bool] = {
    "default": False,
    "reduce-overhead": True,
    "max-autotune": True,
    "max-autotune-no-cudagraphs": True,
}
CUDA_GRAPH_MODES = {"reduce-overhead", "max-autotune"}
MEGACACHE = PARTS["megacache"][0]
ENV_INDUCTOR, ENV_TRITON = "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"


class CompiledBackend(BackendBase):
    """``torch.compile(mode=mode)`` around the network prepared by ``recipe``."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        recipe: Recipe | None = None,
        mode: str = "default",
        cache_dir: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(device)
        if mode not in MODES:
            raise UserError(f"unknown torch.compile mode {mode!r}; use {', '.join(MODES)}")
        if MODES[mode] and device.type != "cuda":
            raise BackendUnavailable(f"torch.compile mode {mode} needs a CUDA device")
        recipe = Recipe.from_options(options, "compile", ("mode", "cache_dir"), recipe=recipe)
        self.recipe, self.mode, self.precision = recipe, mode, recipe.precision
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else None
        self.model = prepare_model(model, device, recipe)
        self.cache_loaded = self._load_megacache()
        self._compiled = torch.compile(
            self._forward, mode=None if mode == "default" else mode, dynamic=False, fullgraph=True
        )
        self._sizes: set[tuple[int, ...]] = set()

    def _forward(self, batch: Tensor) -> Tensor:
        with autocast_context(self.recipe, self.device):
            return self.model(prepare_input(batch, self.recipe))[0].float()

    def run(self, batch: Tensor) -> Tensor:
        shape = tuple(batch.shape)
        with cudnn_benchmark(self.recipe.cudnn_benchmark):
            if shape in self._sizes:
                out = self._compiled(batch)
            else:
                with self._inductor_cache():
                    out = self._compiled(batch)
                self._sizes.add(shape)
                self._save_megacache()
        # CUDA-graph outputs are overwritten by the next replay; callers may keep results.
        return out.clone() if self.mode in CUDA_GRAPH_MODES else out

    @contextmanager
    def _inductor_cache(self) -> Iterator[None]:
        """Inductor's and Triton's on-disk caches under ``cache_dir`` while compiling.

        Both variables are set: inductor pins ``TRITON_CACHE_DIR`` to the first cache directory
        it sees, which would let one variant's Triton binaries warm another's "cold" compile.
        In-memory caches are cleared on entry and exit, as in inductor's own
        ``temporary_cache_dir``.
        """
        if self.cache_dir is None:
            yield
            return
        clear_caches = _clear_inductor_caches()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        wanted = {ENV_INDUCTOR: part_path("inductor", self.cache_dir),
                  ENV_TRITON: part_path("triton", self.cache_dir)}
        saved = {key: os.environ.get(key) for key in wanted}
        os.environ.update({key: str(path) for key, path in wanted.items()})
        clear_caches()
        try:
            yield
        finally:
            clear_caches()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def _load_megacache(self) -> bool:
        """Unpack ``megacache.bin`` into the on-disk caches (inside ``_inductor_cache``, so the
        artifacts land where this backend's compiles look)."""
        path = self.cache_dir / MEGACACHE if self.cache_dir else None
        if path is None or not path.is_file():
            return False
        try:
            with self._inductor_cache():
                torch.compiler.load_cache_artifacts(path.read_bytes())
        except Exception as exc:  # noqa: BLE001  (a stale cache must not stop inference)
            log.warning("ignoring unusable compile cache %s: %s", path, exc)
            return False
        return True

    def _save_megacache(self) -> None:
        if self.cache_dir is None:
            return
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            return
        with atomic_write(self.cache_dir / MEGACACHE, "wb") as f:
            f.write(saved[0])


def _clear_inductor_caches() -> Callable[[], None]:
    """Inductor's in-memory caches' reset (``clear_caches`` in torch 2.13, formerly
    ``clear_inductor_caches``; a no-op where neither exists)."""
    import torch._inductor.utils as inductor_utils

    for name in ("clear_caches", "clear_inductor_caches"):
        if hasattr(inductor_utils, name):
            return getattr(inductor_utils, name)
    return lambda: None


def _mode_requires(mode: str) -> Requirement | None:
    return needs_cuda if MODES[mode] else None


@register(
    "compile",
    description="torch.compile with options mode, precision, autocast, fold, channels_last, "
    "cudnn_benchmark, cache_dir",
    tags=("disk-cache", "options"),
    options=("mode", *RECIPE_OPTIONS),
)
def _compile(model: torch.nn.Module, device: torch.device, **options: Any) -> CompiledBackend:
    return CompiledBackend(model, device, **options)


_R = Recipe
# The seed's rows (FP32, FP16 autocast), FP16 weights, and the baseline's best recipe (BN folded,
# FP16 weights, channels_last); any other combination through the generic "compile" entry.
_COMBOS: dict[str, list[Recipe]] = {
    "default": [
        _R("fp32"),
        _R("fp16", autocast=True),
        _R("fp16"),
        _R("fp32", fold=True),
        _R("fp16", fold=True, channels_last=True),
    ],
    "reduce-overhead": [
        _R("fp32"),
        _R("fp16", autocast=True),
        _R("fp16"),
        _R("fp16", fold=True, channels_last=True),
        _R("fp16", fold=True, channels_last=True, cudnn_benchmark=True),
    ],
    "max-autotune": [_R("fp16", fold=True, channels_last=True)],
    "max-autotune-no-cudagraphs": [
        _R("fp32"),
        _R("fp16", autocast=True),
        _R("fp16", fold=True, channels_last=True),
    ],
}
for _mode, _recipes in _COMBOS.items():
    register_recipes(
        f"compile-{_mode}",
        CompiledBackend,
        _recipes,
        f"torch.compile mode={_mode}",
        requires=_mode_requires(_mode),
        tags=("disk-cache",),
        mode=_mode,
    )

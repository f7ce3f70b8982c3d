"""How a backend prepares the one network: precision, autocast, memory layout, BN folding.

A :class:`Recipe` names a way of running the network; :func:`prepare_model` applies it to a
copy of the model (the caller's model is never converted in place, except that the plain FP32
recipe moves it to the device as :class:`~ttball.backends.eager.EagerBackend` always has).
Variant names are built from recipes so every backend family spells them the same way:
``<family>[-<mode>]-<precision>[-autocast][-folded][-cl][-cudnnbench]``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import Tensor, nn

from ttball.backends.base import Requirement, refuse_unknown, register
from ttball.errors import UserError

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}


@dataclass(frozen=True)
class Recipe:
    """``precision`` is the dtype the convolutions run in. With ``autocast`` the weights stay
    FP32 and :func:`torch.autocast` casts per op; without it the weights are converted
    (``model.half()`` / ``.bfloat16()``) and the input is cast once."""

    precision: str = "fp32"
    autocast: bool = False
    channels_last: bool = False
    fold: bool = False
    cudnn_benchmark: bool = False

    def __post_init__(self) -> None:
        if self.precision not in DTYPES:
            raise UserError(f"unknown precision {self.precision!r}; use {', '.join(DTYPES)}")
        if self.autocast and self.precision == "fp32":
            raise UserError("autocast needs a reduced precision (fp16 or bf16)")

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.precision]

    @property
    def weight_dtype(self) -> torch.dtype:
        return torch.float32 if self.autocast else self.dtype

    def suffix(self, omit: tuple[str, ...] = ()) -> str:
        """``fp16-autocast-folded-cl``: the part of a variant name this recipe decides (without
        the words in ``omit``, which the family's name already implies)."""
        words = [
            ("autocast", self.autocast),
            ("folded", self.fold),
            ("cl", self.channels_last),
            ("cudnnbench", self.cudnn_benchmark),
        ]
        return "-".join([self.precision] + [w for w, on in words if on and w not in omit])

    def describe(self, omit: tuple[str, ...] = ()) -> str:
        """``FP16 weights, BN folded, channels_last``: what the recipe does (without what the
        words in ``omit`` say the family's own description already says)."""
        how = f"{self.precision.upper()} " + ("autocast" if self.autocast else "weights")
        extras = [
            ("BN folded", self.fold and "folded" not in omit),
            ("channels_last", self.channels_last),
            ("cudnn.benchmark", self.cudnn_benchmark),
        ]
        return ", ".join([how] + [text for text, on in extras if on])

    def tags(self) -> tuple[str, ...]:
        return (self.precision,) + tuple(
            tag
            for tag, on in (
                ("autocast", self.autocast),
                ("folded", self.fold),
                ("channels_last", self.channels_last),
            )
            if on
        )

    @classmethod
    def split(cls, options: dict[str, Any]) -> tuple[Recipe, dict[str, Any]]:
        """Take the recipe's fields out of ``options``; the rest goes back to the caller."""
        names = {f.name for f in fields(cls)}
        recipe = cls(**{k: v for k, v in options.items() if k in names})
        return recipe, {k: v for k, v in options.items() if k not in names}

    @classmethod
    def from_options(
        cls, options: dict[str, Any], backend: str, takes: tuple[str, ...] = (),
        recipe: Recipe | None = None,
    ) -> Recipe:
        """``recipe``, else the recipe in ``options`` (for a backend class built directly);
        any other option is refused as :func:`~ttball.backends.base.create` refuses it, naming
        ``backend`` and what it ``takes`` besides the recipe's fields. A ``recipe`` given with
        fields of its own is refused: one of the two would be ignored."""
        if recipe is not None:
            both = sorted(set(options) & set(RECIPE_OPTIONS))
            if both:
                raise UserError(f"backend {backend} got recipe= and {', '.join(both)}: give "
                                "the recipe or its fields, not both")
            refuse_unknown(backend, options, takes, takes)
            return recipe
        recipe, rest = cls.split(options)
        refuse_unknown(backend, rest, RECIPE_OPTIONS + takes)
        return recipe


RECIPE_OPTIONS = tuple(f.name for f in fields(Recipe))
"""The options a :class:`Recipe` is spelt with (``precision``, ``autocast``, ...)."""


def prepare_model(model: nn.Module, device: torch.device, recipe: Recipe) -> nn.Module:
    """``model`` converted by ``recipe`` on ``device``, in eval mode."""
    converts = recipe.fold or recipe.channels_last or recipe.weight_dtype != torch.float32
    if not converts:
        return model.to(device).eval()
    prepared = copy.deepcopy(model).eval()
    if recipe.fold:
        from ttball.passes import fold_batchnorm

        prepared, _ = fold_batchnorm(prepared)
    prepared = prepared.to(device=device, dtype=recipe.weight_dtype)
    if recipe.channels_last:
        prepared = prepared.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return prepared


def prepare_input(batch: Tensor, recipe: Recipe) -> Tensor:
    """The ``(B, 9, H, W)`` batch in the dtype and layout the prepared model expects."""
    x = batch.to(recipe.weight_dtype)
    return x.contiguous(memory_format=torch.channels_last) if recipe.channels_last else x


def autocast_context(
    recipe: Recipe, device: torch.device, cache_enabled: bool = True
) -> AbstractContextManager[Any]:
    """``torch.autocast`` for autocast recipes. CUDA-graph capture needs ``cache_enabled=False``
    (cached weight casts made during capture would be freed with the autocast region)."""
    if not recipe.autocast:
        return nullcontext()
    return torch.autocast(device.type, dtype=recipe.dtype, cache_enabled=cache_enabled)


@contextmanager
def cudnn_benchmark(enabled: bool) -> Iterator[None]:
    """Set ``torch.backends.cudnn.benchmark`` for the block and restore it after."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def pinned(fixed: dict[str, Any]) -> dict[str, Any]:
    """``fixed`` with a fixed ``recipe``'s fields spelt out (``precision="fp16"``, ...): a
    :func:`preset` variant's ``pinned=``, the options ``create`` takes only with these values."""
    recipe = fixed.get("recipe")
    return {**(asdict(recipe) if isinstance(recipe, Recipe) else {}), **fixed}


def preset(factory: Callable[..., Any], **fixed: Any) -> Callable[..., Any]:
    """A registry factory with some options fixed. Registered with ``pinned=`` (:func:`pinned`):
    :func:`~ttball.backends.base.create` refuses a pinned option given another value and drops
    one given its own, so no option reaches ``factory`` twice."""

    def build(model: nn.Module, device: torch.device, **options: Any) -> Any:
        return factory(model, device, **fixed, **options)

    return build


def requirement(recipe: Recipe, extra: Requirement | None = None) -> Requirement:
    """Why ``recipe`` (plus the family's own ``extra`` requirement) can't run on a device."""

    def requires(device: torch.device) -> str | None:
        if recipe.cudnn_benchmark and device.type != "cuda":
            return "cudnn.benchmark needs a CUDA device (cuDNN)"
        return extra(device) if extra else None

    return requires


def register_recipes(
    family: str,
    factory: Callable[..., Any],
    recipes: list[Recipe],
    what: str,
    *,
    requires: Requirement | None = None,
    omit: tuple[str, ...] = (),
    tags: tuple[str, ...] = (),
    **fixed: Any,
) -> None:
    """Register ``<family>-<recipe suffix>`` for each recipe: a family's table of variants.

    The factory is called as ``factory(model, device, recipe=recipe, **fixed, **options)``;
    a variant takes ``cache_dir`` where ``tags`` has ``disk-cache``, and its fixed options
    (:func:`pinned`) only with their own values.
    """
    for recipe in recipes:
        register(
            f"{family}-{recipe.suffix(omit)}",
            description=f"{what}, {recipe.describe(omit)}",
            requires=requirement(recipe, requires),
            tags=recipe.tags() + tags,
            pinned=pinned({"recipe": recipe, **fixed}),
        )(preset(factory, recipe=recipe, **fixed))

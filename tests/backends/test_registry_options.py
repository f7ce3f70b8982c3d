"""The registry's options contract: every entry refuses an option it does not use with one
:class:`UserError` (``backend NAME takes no option X; it takes: ...``), raised by ``create``
before the device is checked or anything is built, and takes the options its family uses.

Nothing here runs the network: the backends that take options build lazily (exports, sessions
and compiles happen on the first call), so the tests stay quick on two shared cores.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from ttball.backends import base, create, names, unavailable_reason
from ttball.backends._recipe import Recipe
from ttball.backends.base import cache_options, spec
from ttball.bench.runner import precision_of
from ttball.errors import BackendUnavailable, UserError
from ttball.model import BlurBall


def _refusal(name: str, *options: str) -> str:
    return rf"^backend {re.escape(name)} takes no options? {re.escape(', '.join(options))}; it takes"


@pytest.mark.parametrize("name", names())
def test_every_entry_refuses_an_option_it_does_not_take(small_model: BlurBall, name: str) -> None:
    """The same error whatever the family, and whether or not the entry can run here."""
    with pytest.raises(UserError, match=_refusal(name, "bogus")):
        create(name, small_model, "cpu", bogus=1)


def test_the_message_lists_what_the_entry_takes(small_model: BlurBall) -> None:
    with pytest.raises(UserError, match=r"^backend null takes no option bogus; it takes none$"):
        create("null", small_model, "cpu", bogus=1)
    with pytest.raises(UserError, match=r"takes no options bogus, threads; it takes: "
                                        r"cache_dir, config, execution_mode, "):
        create("onnxrt-fp32", small_model, "cpu", threads=2, bogus=1)


def test_a_variant_offers_what_it_does_not_fix(small_model: BlurBall) -> None:
    """A preset takes its fixed options only with their own values: they are accepted, and
    neither the message nor ``bench --list`` offers them (eager-fp16 listed ``autocast,
    channels_last, ...``, each of which it refuses with another value)."""
    with pytest.raises(UserError, match=r"^backend eager-fp16 takes no option bogus; it takes none$"):
        create("eager-fp16", small_model, "cpu", bogus=1)
    with pytest.raises(UserError, match=r"; it takes: cache_dir$"):
        create("compile-default-fp16", small_model, "cpu", bogus=1)
    assert create("eager-fp16", small_model, "cpu", precision="fp16").name == "eager-fp16"
    rows = {row["name"]: row for row in base.describe("cpu")}
    assert rows["eager-fp16"]["options"] == [] and rows["compile-default-fp16"]["options"] == [
        "cache_dir"]
    direct = spec("triton-fp16-direct")
    assert "direct" in direct.accepts and "direct" not in rows["triton-fp16-direct"]["options"]
    assert rows["compile"]["options"] == sorted(spec("compile").accepts)


def _explode(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("called before the options were checked")


@pytest.mark.parametrize("name", names())
def test_the_refusal_comes_before_the_device_and_the_factory(
    monkeypatch: pytest.MonkeyPatch, small_model: BlurBall, name: str
) -> None:
    """A misspelt option is the caller's mistake on every machine: refused before the device is
    resolved (``cuda`` here has no GPU), its requirement asked, or its factory run (nothing
    exported or compiled)."""
    entry = dataclasses.replace(spec(name), factory=_explode, requires=_explode)
    monkeypatch.setitem(base._REGISTRY, name, entry)
    with pytest.raises(UserError, match=_refusal(name, "bogus")):
        create(name, small_model, "cuda:7", bogus=1)


@pytest.mark.parametrize("name", names())
def test_what_cache_options_gives_an_entry_is_taken(tmp_path: Path, name: str) -> None:
    """``bench``, ``serve --compile-cache`` and ``--backend auto`` pass ``cache_options``."""
    assert set(cache_options(name, tmp_path)) <= spec(name).accepts


def _built_or_unavailable(name: str, model: BlurBall, options: dict[str, Any]) -> None:
    """``create`` with ``options`` builds the entry, or says the entry can't run here (then the
    options got past the check: that comes first)."""
    assert set(options) <= spec(name).accepts, sorted(set(options) - spec(name).accepts)
    if unavailable_reason(name, "cpu"):
        with pytest.raises(BackendUnavailable):
            create(name, model, "cpu", **options)
    else:
        assert create(name, model, "cpu", **options).name == name


FAMILY_OPTIONS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "compile": lambda tmp: {"mode": "default", "precision": "fp16", "autocast": True,
                            "fold": False, "channels_last": True, "cudnn_benchmark": False,
                            "cache_dir": tmp},
    "compile-default-fp32": lambda tmp: {"cache_dir": tmp, "mode": "default",
                                         "recipe": Recipe("fp32")},
    "eager-fp16-cl": lambda tmp: {"recipe": Recipe("fp16", channels_last=True),
                                  "precision": "fp16", "channels_last": True, "fold": False},
    "cudagraph-fp16": lambda tmp: {"precision": "fp16"},
    "onnxrt-fp32": lambda tmp: {"cache_dir": tmp, "graph_optimization_level": "basic",
                                "intra_op_threads": 1, "inter_op_threads": 1,
                                "execution_mode": "sequential",
                                "config": {"session.intra_op.allow_spinning": "0"}},
    "onnxrt-int8": lambda tmp: {"cache_dir": tmp, "calibrate": (), "windows": (),
                                "method": None, "intra_op_threads": 1},
    "ort-mobile-int8": lambda tmp: {"cache_dir": tmp, "windows": ()},
    "onnxrt-cuda-fp16": lambda tmp: {"cache_dir": tmp, "intra_op_threads": 1},
    "openvino-fp32": lambda tmp: {"cache_dir": tmp, "threads": 1, "hint": "LATENCY",
                                  "config": {}},
    "openvino-int8": lambda tmp: {"cache_dir": tmp, "calibrate": (), "method": None},
    "tensorrt-fp16": lambda tmp: {"cache_dir": tmp},
    "triton-fp16": lambda tmp: {"tune": False, "project": "tail", "cache_dir": tmp,
                                "records": False, "pdl": False},
}


@pytest.mark.parametrize("name", FAMILY_OPTIONS)
def test_each_family_takes_its_own_options(small_model: BlurBall, tmp_path: Path,
                                           name: str) -> None:
    _built_or_unavailable(name, small_model, FAMILY_OPTIONS[name](tmp_path))


def test_calibration_is_an_int8_option_only(small_model: BlurBall) -> None:
    """The FP32 and FP16 exports are not calibrated: ``calibrate`` there would do nothing."""
    for name in ("onnxrt-fp32", "ort-mobile-fp32", "openvino-fp32"):
        with pytest.raises(UserError, match=_refusal(name, "calibrate")):
            create(name, small_model, "cpu", calibrate=())


PRESETS_HERE = [n for n in names() if n.startswith(("eager-", "folded-", "compile-"))
                and n != "eager-fp32" and not unavailable_reason(n, "cpu")]


@pytest.mark.parametrize("name", PRESETS_HERE)
def test_a_preset_takes_its_fixed_options_only_with_their_values(small_model: BlurBall,
                                                                 name: str) -> None:
    """``eager-fp16`` takes ``precision="fp16"``, as its name says it; another precision is an
    error (it was ignored: the entry ran as its name says)."""
    own = precision_of(name)
    assert create(name, small_model, "cpu", precision=own).precision == own
    other = "bf16" if own == "fp16" else "fp16"
    with pytest.raises(UserError, match="contradict"):
        create(name, small_model, "cpu", precision=other)


def test_a_contradicting_fixed_option_is_refused_before_the_device(
    monkeypatch: pytest.MonkeyPatch, small_model: BlurBall
) -> None:
    """``cudagraph-fp16`` with ``precision="fp32"`` said "unavailable on cpu" (the clash was
    found in its factory, after the requirement): now the same error on every machine."""
    with pytest.raises(UserError, match="contradict this variant's fixed {'precision': 'fp16'}"):
        create("cudagraph-fp16", small_model, "cpu", precision="fp32")
    with pytest.raises(UserError, match="contradict this variant's fixed {'direct': True}"):
        create("triton-fp16-direct", small_model, "cpu", direct=False)
    entry = dataclasses.replace(spec("eager-fp16"), factory=_explode, requires=_explode)
    monkeypatch.setitem(base._REGISTRY, "eager-fp16", entry)
    with pytest.raises(UserError, match="contradict"):
        create("eager-fp16", small_model, "cuda:7", precision="bf16")


def test_direct_construction_refuses_the_same_way(small_model: BlurBall) -> None:
    """A backend class built without the registry says it as ``create`` does."""
    from ttball.backends.compiled import CompiledBackend
    from ttball.backends.eager import EagerBackend

    cpu = torch.device("cpu")
    with pytest.raises(UserError, match=_refusal("eager", "bogus")):
        EagerBackend(small_model, cpu, bogus=1)
    with pytest.raises(UserError, match=_refusal("compile", "bogus") + r": .*cache_dir"):
        CompiledBackend(small_model, cpu, bogus=1)


def test_direct_construction_refuses_a_recipe_with_fields(small_model: BlurBall) -> None:
    """``recipe=`` and a recipe field together: one of the two would be ignored (the fields
    were, and an FP16 recipe with ``precision="fp32"`` ran FP16)."""
    from ttball.backends._recipe import Recipe
    from ttball.backends.compiled import CompiledBackend
    from ttball.backends.eager import EagerBackend

    cpu, fp16 = torch.device("cpu"), Recipe("fp16")
    with pytest.raises(UserError, match="eager got recipe= and precision: give the recipe"):
        EagerBackend(small_model, cpu, recipe=fp16, precision="fp32")
    with pytest.raises(UserError, match="compile got recipe= and channels_last, fold"):
        CompiledBackend(small_model, cpu, recipe=fp16, fold=True, channels_last=True)
    with pytest.raises(UserError, match=_refusal("eager", "bogus")):
        EagerBackend(small_model, cpu, recipe=fp16, bogus=1)
    assert EagerBackend(small_model, cpu, recipe=Recipe("bf16")).precision == "bf16"


def _keywords(fn: Callable[..., Any], *leave: str) -> set[str]:
    """The keyword parameters of ``fn`` but ``leave``, ``self``, ``model``, ``device``."""
    params = inspect.signature(fn).parameters.values()
    return {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)} - {
        "self", "model", "device", *leave}


def test_declared_options_are_what_the_constructors_take() -> None:
    """Declared once, next to the code that uses them: the declarations follow the signatures
    (checked here for the families that can't be built without a GPU too)."""
    from ttball.backends import onnxrt, openvino, triton
    from ttball.backends._recipe import RECIPE_OPTIONS
    from ttball.backends.onnxrt import SessionSettings
    from ttball.export.cache import cached_onnx

    assert set(triton.OPTIONS) == _keywords(triton.TritonBackend.__init__)
    assert set(openvino.OPTIONS) | set(onnxrt.CALIBRATION_OPTIONS) == _keywords(
        openvino.OpenVinoBackend.__init__, "precision", "inference_precision")
    assert set(onnxrt.SESSION_OPTIONS) == {
        f.name for f in dataclasses.fields(SessionSettings)} - {"providers"}
    assert set(onnxrt.CALIBRATION_OPTIONS) == _keywords(
        cached_onnx, "height", "width", "precision", "cache_dir")
    assert spec("compile").accepts == {"mode", "cache_dir", *RECIPE_OPTIONS}
    assert spec("triton-fp16-pdl").accepts == set(triton.OPTIONS)


@pytest.mark.parametrize("name", names())
def test_an_entry_taking_cache_dir_is_handed_one(name: str, tmp_path: Path) -> None:
    """``bench --cache-dir``, ``serve``/``track --compile-cache`` and ``auto`` hand
    ``cache_dir`` through :func:`cache_options`, by the ``disk-cache`` tag: an entry that takes
    it must carry the tag (the ONNX Runtime and OpenVINO entries took it untagged, so they
    exported into the default cache whatever the command was given)."""
    takes = "cache_dir" in spec(name).takes
    assert takes == ("disk-cache" in spec(name).tags)
    assert cache_options(name, tmp_path) == ({"cache_dir": str(tmp_path)} if takes else {})


def test_onnx_runtime_exports_into_the_cache_it_is_handed(small_model: BlurBall,
                                                          tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    name = "onnxrt-fp32"
    backend = create(name, small_model, "cpu", **cache_options(name, tmp_path))
    backend(torch.rand(1, 9, 48, 64))
    assert list(tmp_path.rglob("*.onnx")), "the export went elsewhere"

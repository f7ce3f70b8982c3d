"""ONNX Runtime and OpenVINO backends: parity with eager FP32, one cached export shared by every
CPU entry, options checked, INT8 close to FP32, GPU entries listed with their reason."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SMALL

from ttball.backends import create, unavailable_reason
from ttball.backends.base import spec
from ttball.backends.onnxrt import OnnxRuntimeBackend  # importing registers onnxrt-*
from ttball.backends.openvino import _openvino_missing  # importing registers openvino-*
from ttball.errors import UserError
from ttball.model import BlurBall

H, W = SMALL
HAS_OPENVINO = _openvino_missing(torch.device("cpu")) is None


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def batch() -> torch.Tensor:
    return torch.randn(2, 9, H, W, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def reference(small_model: BlurBall, batch: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return small_model(batch)[0].clone()


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("name", ["onnxrt-fp32", "onnxrt-fp32-tuned"])
def test_fp32_matches_eager(name: str, small_model: BlurBall, cache: Path,
                            batch: torch.Tensor, reference: torch.Tensor) -> None:
    backend = create(name, small_model, "cpu", cache_dir=cache)
    out = backend(batch)
    assert out.dtype == torch.float32 and out.device.type == "cpu"
    torch.testing.assert_close(out, reference, rtol=1e-4, atol=1e-4)
    backend(batch[:1])
    assert backend.warmed == {1, 2} and len(backend.sessions) == 1  # one session, any batch


def test_cpu_entries_share_one_cached_export(small_model: BlurBall, cache: Path,
                                             batch: torch.Tensor) -> None:
    a = create("onnxrt-fp32", small_model, "cpu", cache_dir=cache)
    b = create("onnxrt-fp32-tuned", small_model, "cpu", cache_dir=cache, intra_op_threads=1,
               graph_optimization_level="extended", execution_mode="parallel")
    a(batch[:1]), b(batch[:1])
    assert isinstance(a, OnnxRuntimeBackend) and a.paths == b.paths
    assert len(list((cache / "onnx").glob("blurball-fp32-*.onnx"))) == 1
    assert b.settings.config == {"session.intra_op.allow_spinning": "0"}


def test_options_are_checked(small_model: BlurBall, cache: Path, batch: torch.Tensor) -> None:
    with pytest.raises(UserError, match="backend onnxrt-fp32 takes no option threads"):
        create("onnxrt-fp32", small_model, "cpu", cache_dir=cache, threads=2)
    backend = create("onnxrt-fp32", small_model, "cpu", cache_dir=cache,
                     graph_optimization_level="fastest")
    with pytest.raises(UserError, match="graph_optimization_level"):
        backend(batch[:1])


def test_int8_is_close_to_fp32(small_model: BlurBall, cache: Path, batch: torch.Tensor,
                               reference: torch.Tensor) -> None:
    windows = [np.random.default_rng(i).standard_normal((1, 9, H, W), dtype=np.float32)
               for i in range(3)]
    backend = create("onnxrt-int8", small_model, "cpu", cache_dir=cache, windows=windows)
    out = backend(batch)
    assert _rel(out, reference) < 0.1
    assert np.corrcoef(out.numpy().ravel(), reference.numpy().ravel())[0, 1] > 0.99


def test_gpu_entries_say_why() -> None:
    for name in ("onnxrt-cuda-fp32", "onnxrt-cuda-fp16", "onnxrt-tensorrt-fp16"):
        assert "CUDA" in (unavailable_reason(name, "cpu") or "")
        provider = "Tensorrt" if "tensorrt" in name else "CUDA"
        reason = spec(name).requires(torch.device("cuda"))
        import onnxruntime as ort

        if f"{provider}ExecutionProvider" not in ort.get_available_providers():
            assert reason and "onnxruntime-gpu" in reason
    assert unavailable_reason("onnxrt-fp32", "cuda") == "runs on CPU only"


@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino not installed")
@pytest.mark.parametrize("name, tol", [("openvino-fp32", 1e-5), ("openvino-bf16", 5e-2)])
def test_openvino_matches_eager(name: str, tol: float, small_model: BlurBall, cache: Path,
                                batch: torch.Tensor, reference: torch.Tensor) -> None:
    reason = unavailable_reason(name, "cpu")
    if reason:
        pytest.skip(reason)
    backend = create(name, small_model, "cpu", cache_dir=cache)
    assert _rel(backend(batch), reference) < tol
    backend(batch[:1])
    assert len(backend.requests) == 2  # one compiled model per batch shape


def test_openvino_says_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)  # makes `import openvino` fail
    assert _openvino_missing(torch.device("cpu")) == "openvino not installed (pip install openvino)"
    assert unavailable_reason("openvino-int8", "cpu") == "openvino not installed (pip install openvino)"

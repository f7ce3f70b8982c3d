"""ONNX export: the file runs in ONNX Runtime like eager FP32, describes itself, quantises to
INT8, and packages for Triton with the model's real tensor names and dims."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from conftest import SMALL, draw_clip

from ttball.export import export_onnx, read_metadata
from ttball.export.onnx import ExportResult, ort_logits, random_window
from ttball.export.quantize import calibration_windows, quantize_int8
from ttball.export.triton import tensor_specs, write_triton_repo
from ttball.model import BlurBall, WeightsConfig, state_dict_sha256

H, W = SMALL


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, small_model: BlurBall) -> ExportResult:
    path = tmp_path_factory.mktemp("onnx") / "blurball.onnx"
    return export_onnx(small_model, path, dynamic_batch=True, height=H, width=W)


def _eager(model: BlurBall, x: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return model(torch.from_numpy(x))[0].numpy()


def test_runs_in_onnx_runtime_like_eager(exported: ExportResult, small_model: BlurBall) -> None:
    assert exported.max_abs_diff < 1e-4 and exported.max_rel_diff < 1e-5
    x = random_window(H, W, batch=2, seed=1)  # a batch size the export was not traced with
    np.testing.assert_allclose(ort_logits(exported.path, x), _eager(small_model, x),
                               rtol=1e-4, atol=1e-4)


def test_graph_is_checked_and_named(exported: ExportResult) -> None:
    model = onnx.load(str(exported.path))
    onnx.checker.check_model(model, full_check=True)
    (inp,), (out,) = model.graph.input, model.graph.output
    dims = lambda v: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
    assert (inp.name, dims(inp)[1:]) == ("frames", [9, H, W])
    assert (out.name, dims(out)[1:]) == ("heatmaps", [3, H, W])
    assert isinstance(dims(inp)[0], str), "batch dimension should be dynamic"
    ops = {n.op_type for n in model.graph.node}
    assert "BatchNormalization" not in ops and "Conv" in ops


def test_metadata_is_all_a_consumer_needs(exported: ExportResult, small_model: BlurBall) -> None:
    meta = read_metadata(exported.path)
    config = small_model.config
    assert meta["input_name"] == "frames" and meta["output_name"] == "heatmaps"
    assert (meta["input_height"], meta["input_width"]) == (str(H), str(W))
    assert meta["input_shape"] == f"B,9,{H},{W}" and meta["frames_in"] == "3"
    assert [float(v) for v in meta["mean"].split(",")] == pytest.approx(config.mean)
    assert [float(v) for v in meta["std"].split(",")] == pytest.approx(config.std)
    assert meta["resize"].startswith("bilinear") and "oldest first" in meta["layout"]
    assert float(meta["score_threshold"]) == config.score_threshold
    assert meta["weights_sha256"] == state_dict_sha256(small_model.state_dict())
    assert meta["ttball.version"] and meta["precision"] == "fp32" and meta["opset"] == "18"
    carried = WeightsConfig.from_json(meta["ttball.config"])
    assert carried.input_size == (H, W) and carried.sha256 == meta["weights_sha256"]


def test_int8_export_correlates_with_fp32(exported: ExportResult, small_model: BlurBall,
                                          tmp_path: Path) -> None:
    clip = tmp_path / "clip.mp4"
    draw_clip(clip, frames=15)
    windows = calibration_windows([clip], small_model.config, H, W)
    assert len(windows) == 5 and windows[0].shape == (1, 9, H, W)
    result = quantize_int8(exported.path, tmp_path / "int8.onnx", windows[:4])
    assert read_metadata(result.path)["precision"] == "int8"
    ops = {n.op_type for n in onnx.load(str(result.path)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    ref, got = _eager(small_model, windows[4]), ort_logits(result.path, windows[4])
    assert np.corrcoef(ref.ravel(), got.ravel())[0, 1] > 0.98
    assert result.max_abs_diff < 0.1 * np.abs(ref).max() + 0.05


def _parse_pbtxt(text: str) -> dict:
    """A minimal protobuf text-format reader. Each field maps to the list of its values; a
    bracketed list of messages extends that list, a bracketed list of scalars is one value."""
    tokens = re.findall(r'"[^"]*"|[{}\[\]:,]|[^\s{}\[\]:,"]+', text)
    pos = 0

    def value() -> object:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "{":
            return message("}")
        if tok == "[":
            items = []
            while tokens[pos] != "]":
                items.append(value())
                pos += tokens[pos] == ","
            pos += 1
            return items
        if tok.startswith('"'):
            return tok[1:-1]
        return int(tok) if re.fullmatch(r"-?\d+", tok) else tok

    def message(end: str | None) -> dict:
        nonlocal pos
        fields: dict[str, list] = {}
        while pos < len(tokens) and tokens[pos] != end:
            name = tokens[pos]
            pos += 2 if tokens[pos + 1] == ":" else 1
            v = value()
            many = isinstance(v, list) and all(isinstance(i, dict) for i in v)
            fields.setdefault(name, []).extend(v if many else [v])
        pos += 1
        return fields

    return message(None)


def test_triton_repo_names_the_real_tensors(exported: ExportResult, tmp_path: Path) -> None:
    repo = write_triton_repo(None, tmp_path / "repo", source=exported.path, max_batch_size=4)
    assert repo.model == tmp_path / "repo" / "blurball" / "1" / "model.onnx"
    config = _parse_pbtxt(repo.config.read_text())
    graph = onnx.load(str(repo.model)).graph
    assert config["platform"] == ["onnxruntime_onnx"] and config["max_batch_size"] == [4]
    (inp,), (out,) = config["input"], config["output"]
    assert inp["name"] == [graph.input[0].name] and out["name"] == [graph.output[0].name]
    assert inp["dims"] == [[9, H, W]] and out["dims"] == [[3, H, W]]
    assert inp["data_type"] == ["TYPE_FP32"] and out["data_type"] == ["TYPE_FP32"]
    assert config["dynamic_batching"][0]["preferred_batch_size"] == [[1, 2, 3]]
    warmups = config["model_warmup"]
    assert [w["batch_size"] for w in warmups] == [[1], [2], [3]]
    for w in warmups:
        (entry,) = w["inputs"]
        assert entry["key"] == [graph.input[0].name]
        assert entry["value"][0]["dims"] == [[9, H, W]]
    assert tensor_specs(repo.model)[0].dims == (9, H, W)


def test_a_triton_repo_is_checked_before_its_model_is_written(exported: ExportResult,
                                                            tmp_path: Path) -> None:
    """config.pbtxt in a folder's place failed after model.onnx was written; a max batch size
    past int32 was written into the config."""
    from ttball.errors import UserError

    (tmp_path / "repo" / "blurball" / "config.pbtxt").mkdir(parents=True)
    with pytest.raises(UserError, match="config.pbtxt is a folder"):
        write_triton_repo(None, tmp_path / "repo", source=exported.path)
    assert not (tmp_path / "repo" / "blurball" / "1" / "model.onnx").exists()
    with pytest.raises(UserError, match=r"max batch size must be in \[3, 2147483647\]"):
        write_triton_repo(None, tmp_path / "other", source=exported.path,
                          max_batch_size=2**31)


def test_export_cli(tmp_path: Path, small_weights: Path) -> None:
    from ttball.cli import COMMANDS, main

    COMMANDS.setdefault("export", ("ttball.cli.export", "export the network"))
    out = tmp_path / "m.onnx"
    assert main(["export", "onnx", "--out", str(out), "--weights", str(small_weights),
                 "--exporter", "torchscript"]) == 0
    meta = read_metadata(out)
    assert meta["input_shape"] == f"1,9,{H},{W}" and meta["weights_name"] == "test-small"
    assert main(["export", "onnx", "--out", str(out), "--fp16", "--int8"]) == 2
    assert main(["export", "onnx", "--out", str(out), "--calibrate", str(out)]) == 2
    assert main(["export", "onnx", "--out", str(tmp_path / "m.txt")]) == 2
    assert main(["export", "onnx", "--out", str(out), "--opset", "17", "--size", "72x127"]) == 2
    assert main(["export", "triton", "--out", str(tmp_path / "r"), "--onnx", str(out)]) == 2


def test_the_command_lines_offer_the_calibration_methods_quantize_knows() -> None:
    """`export onnx` and `verify` name the methods without importing onnx at parse time."""
    import argparse

    from ttball.cli import export, verify
    from ttball.export.quantize import METHODS

    assert export.CALIBRATION_METHODS == METHODS
    for module, argv in ((export, ["onnx", "--out", "x.onnx"]), (verify, ["--backend", "x"])):
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        for method in METHODS:
            assert parser.parse_args([*argv, "--calibration-method", method]).calibration_method \
                == method

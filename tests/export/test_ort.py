"""ONNX Runtime's format for phones (.ort): runs like its ONNX file, keeps the metadata, lists
its operators; written whole or not at all; the ort-mobile-* backends run it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SMALL

from ttball.backends import create
from ttball.export import export_onnx, read_metadata
from ttball.export.onnx import ExportResult, ort_logits, ort_run, random_window
from ttball.export.ort import convert_to_ort, operators_path, ort_file_session
from ttball.export.quantize import quantize_int8
from ttball.model import BlurBall

H, W = SMALL


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, small_model: BlurBall) -> ExportResult:
    path = tmp_path_factory.mktemp("onnx") / "blurball.onnx"
    return export_onnx(small_model, path, dynamic_batch=True, height=H, width=W)


@pytest.mark.parametrize("platform", ["arm", "amd64"])
def test_ort_file_runs_like_its_onnx_and_keeps_the_metadata(exported: ExportResult,
                                                           tmp_path: Path, platform: str) -> None:
    result = convert_to_ort(exported.path, tmp_path / "ball.ort", platform=platform)
    assert result.path == tmp_path / "ball.ort" and result.platform == platform
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ball.ort",
                                                          "ball.required_operators.config"]
    session = ort_file_session(result.path)
    assert session.get_modelmeta().custom_metadata_map == read_metadata(exported.path)
    window = random_window(H, W, batch=2, seed=3)  # (a dynamic batch stays dynamic)
    got, want = ort_run(session, window), ort_logits(exported.path, window)
    assert got.shape == (2, 3, H, W)
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert result.max_abs_diff < 1e-4
    lines = result.operators.read_text().splitlines()
    assert "# - ball.ort" in lines  # the file it was made from, not a temporary name
    ops = {op for line in lines if not line.startswith("#")
           for op in line.split(";")[2].split(",")}
    assert "Conv" in ops and result.operator_count == len(ops)
    # arm leaves out the x86-only NCHWc layout (its Conv, Upsample, Reorder*) that amd64 gets
    assert ("ReorderInput" in ops) == (platform == "amd64") == ("Resize" not in ops)


def test_int8_for_arm_keeps_int8_kernels(exported: ExportResult, tmp_path: Path) -> None:
    windows = [random_window(H, W, seed=i) for i in range(3)]
    int8 = quantize_int8(exported.path, tmp_path / "int8.onnx", windows).path
    result = convert_to_ort(int8, tmp_path / "int8.ort")
    assert "QLinearConv" in result.operators.read_text()
    window = random_window(H, W, seed=9)
    np.testing.assert_allclose(ort_run(ort_file_session(result.path), window),
                               ort_logits(int8, window), atol=0.05)


def test_a_failed_conversion_leaves_nothing_behind(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    (tmp_path / "out.ort").write_bytes(b"an older export")
    with pytest.raises(Exception, match="(?i)protobuf|parse|load"):
        convert_to_ort(bad, tmp_path / "out.ort")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx", "out.ort"]
    assert (tmp_path / "out.ort").read_bytes() == b"an older export"
    assert operators_path(tmp_path / "out.ort").name == "out.required_operators.config"


def test_an_operator_list_that_cannot_be_written_leaves_the_old_pair(
        exported: ExportResult, tmp_path: Path) -> None:
    """The .ort was moved into place before its operator list, so a folder in the list's place
    left a new .ort beside the old list (and a traceback)."""
    from ttball.errors import UserError

    out = tmp_path / "out.ort"
    out.write_bytes(b"an older export")
    operators_path(out).mkdir()
    with pytest.raises(UserError, match="out.required_operators.config is a folder"):
        convert_to_ort(exported.path, out)
    assert out.read_bytes() == b"an older export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.ort", "out.required_operators.config"]


def test_export_cli_writes_ort(tmp_path: Path, small_weights: Path, capsys) -> None:
    from ttball.cli import COMMANDS, main

    COMMANDS.setdefault("export", ("ttball.cli.export", "export the network"))
    out = tmp_path / "m.ort"
    assert main(["export", "onnx", "--out", str(out), "--weights", str(small_weights),
                 "--platform", "amd64"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out} (ONNX Runtime format, amd64" in printed and "tmp" not in printed.split(
        "wrote")[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.ort", "m.required_operators.config"]
    meta = ort_file_session(out).get_modelmeta().custom_metadata_map
    assert meta["input_shape"] == f"1,9,{H},{W}" and meta["weights_name"] == "test-small"
    assert main(["export", "onnx", "--out", str(tmp_path / "m.onnx"), "--platform", "arm"]) == 2
    assert "--platform only applies with --out X.ort" in capsys.readouterr().err
    assert main(["export", "onnx", "--out", str(tmp_path / "m.tflite")]) == 2
    assert main(["export", "onnx", "--out", str(tmp_path / "h.ort"), "--fp16"]) == 2
    assert "--fp16 with --out X.ort" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["ort-mobile-fp32", "ort-mobile-int8"])
def test_mobile_backends_run_the_ort_file(name: str, small_model: BlurBall,
                                         tmp_path: Path) -> None:
    batch = torch.randn(2, 9, H, W, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        reference = small_model(batch)[0]
    backend = create(name, small_model, "cpu", cache_dir=tmp_path)
    out = backend(batch)
    assert [p.name.endswith(".arm.ort") for p in backend.paths.values()] == [True]
    if name.endswith("fp32"):
        torch.testing.assert_close(out, reference, rtol=1e-4, atol=1e-4)
    else:
        assert np.corrcoef(out.numpy().ravel(), reference.numpy().ravel())[0, 1] > 0.99
    again = create(name, small_model, "cpu", cache_dir=tmp_path)
    again(batch[:1])
    assert again.paths == backend.paths  # converted once, cached beside the export

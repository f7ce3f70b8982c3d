"""INT8 quantisation refuses bad input with one line (:class:`UserError`, or TypeError for a
wrong type) before it writes anything, instead of a traceback from inside ORT, onnx, protobuf or
numpy, a file labelled int8 that is not, or an FP32 file replaced by its own INT8 copy."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import SMALL

from ttball.errors import UserError
from ttball.export import export_onnx, read_metadata
from ttball.export.onnx import ExportResult, random_window
from ttball.export.quantize import calibration_windows, quantize_int8
from ttball.model import BlurBall

H, W = SMALL
WINDOWS = [random_window(H, W, seed=i) for i in range(2)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, small_model: BlurBall) -> ExportResult:
    path = tmp_path_factory.mktemp("onnx") / "blurball.onnx"
    return export_onnx(small_model, path, height=H, width=W)


@pytest.fixture()
def fp32(exported: ExportResult, tmp_path: Path) -> Path:
    path = tmp_path / "fp32.onnx"
    shutil.copy(exported.path, path)
    return path


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_the_fp32_file_itself_is_refused_as_the_output(fp32: Path) -> None:
    """It was replaced by the INT8 file, which was then 'compared' with itself (max_abs_diff
    0.0, argmax_same 1.0)."""
    before = fp32.read_bytes()
    (fp32.parent / "link.onnx").symlink_to(fp32)
    os.link(fp32, fp32.parent / "hard.onnx")
    for out in (fp32, str(fp32), fp32.parent / ".." / fp32.parent.name / "." / fp32.name,
                fp32.parent / "link.onnx", fp32.parent / "hard.onnx"):
        with pytest.raises(UserError, match=re.escape(f"{out} is the FP32 model {fp32} itself")):
            quantize_int8(fp32, out, WINDOWS)
    assert fp32.read_bytes() == before
    assert read_metadata(fp32)["precision"] == "fp32"
    assert _listing(fp32.parent) == ["fp32.onnx", "hard.onnx", "link.onnx"]


@pytest.mark.parametrize(("windows", "message"), [
    ([np.zeros((1, 9, H + 8, W), np.float32)],
     rf"window 0 has shape \(1, 9, {H + 8}, {W}\); .*fp32.onnx takes \(1, 9, {H}, {W}\)"),
    ([w[0] for w in WINDOWS], rf"window 0 has shape \(9, {H}, {W}\); .* takes \(1, 9, {H}, {W}\)"),
    (WINDOWS + [np.zeros((1, 6, H, W), np.float32)], r"window 2 has shape \(1, 6, "),
    ([WINDOWS[0], np.full((1, 9, H, W), np.nan, np.float32)], "window 1 holds NaN or infinite"),
    ([np.full((1, 9, H, W), np.inf, np.float32)], "window 0 holds NaN or infinite"),
    ([np.zeros((1, 9, H, W), np.uint8)], r"window 0 is uint8: windows are preprocessed float32"),
    (WINDOWS[0], rf"windows must be a list of \(1, 9, {H}, {W}\) float32 arrays, got one ndarray"),
    ([], "needs at least one window"),
])
def test_bad_windows_are_named(fp32: Path, windows: object, message: str) -> None:
    """Another size or no batch axis gave ORT's InvalidArgument, NaN 'AssertionError: scale
    issue' (inside ORT's calibration)."""
    with pytest.raises(UserError, match=message):
        quantize_int8(fp32, fp32.parent / "int8.onnx", windows)  # type: ignore[arg-type]
    assert _listing(fp32.parent) == ["fp32.onnx"]


def test_an_unreadable_fp32_file_is_named(fp32: Path, tmp_path: Path) -> None:
    """A missing file gave FileNotFoundError, a garbage one protobuf's DecodeError."""
    out = tmp_path / "int8.onnx"
    with pytest.raises(UserError, match=re.escape(f"FP32 model {tmp_path / 'nope.onnx'} does not exist")):
        quantize_int8(tmp_path / "nope.onnx", out, WINDOWS)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff not a model \x00" * 10)
    with pytest.raises(UserError, match=re.escape(f"FP32 model {garbage} is not an ONNX file")):
        quantize_int8(garbage, out, WINDOWS)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")  # (parses as an empty ModelProto)
    with pytest.raises(UserError, match=re.escape(f"{empty} is not a ttball ONNX export")):
        quantize_int8(empty, out, WINDOWS)
    with pytest.raises(UserError, match=re.escape(f"FP32 model {tmp_path} is a folder")):
        quantize_int8(tmp_path, out, WINDOWS)
    assert not out.exists()


def test_an_output_path_that_cannot_be_written_is_named(fp32: Path, tmp_path: Path) -> None:
    """A missing folder gave FileNotFoundError naming the hidden '.int8.onnx.pre.tmp'."""
    out = tmp_path / "nope" / "int8.onnx"
    with pytest.raises(UserError, match=re.escape(
            f"cannot write {out}: folder {out.parent} does not exist")):
        quantize_int8(fp32, out, WINDOWS)
    (tmp_path / "adir").mkdir()
    with pytest.raises(UserError, match=re.escape(f"{tmp_path / 'adir'} is a folder")):
        quantize_int8(fp32, tmp_path / "adir", WINDOWS)
    assert _listing(tmp_path) == ["adir", "fp32.onnx"]


def test_op_types_must_be_in_the_graph(fp32: Path) -> None:
    """An op type the graph lacks quantised nothing, and the FP32 copy was labelled int8."""
    out = fp32.parent / "int8.onnx"
    with pytest.raises(UserError, match=r"op_types: .*fp32.onnx has no Foo op; its graph has "
                                        r"Add, Conv, .*\(quantisable: .*Conv"):
        quantize_int8(fp32, out, WINDOWS, op_types=["Conv", "Foo"])
    assert not out.exists()
    # one name alone is a list of one (it was split into 'C', 'o', 'n', 'v')
    result = quantize_int8(fp32, out, WINDOWS, op_types="Conv")  # type: ignore[arg-type]
    ops = {n.op_type for n in onnx.load(str(result.path)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    assert read_metadata(result.path)["precision"] == "int8" and result.max_abs_diff > 0


def test_calibration_windows_arguments(clip: Path, small_model: BlurBall) -> None:
    """A single path was split into characters ('/: folder holds no images') or was not
    iterable; limit 0 gave no windows and -1 a numpy ValueError; size 0 an OpenCV assertion."""
    config = small_model.config
    want = calibration_windows([clip], config, H, W, limit=2)
    assert len(want) == 2
    for one in (clip, str(clip)):  # one path is a list of one
        got = calibration_windows(one, config, H, W, limit=2)
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    with pytest.raises(TypeError, match="clips must be a list of paths .*got int"):
        calibration_windows([clip, 3], config, H, W)  # type: ignore[list-item]
    for limit in (0, -1, True, 2.5):
        with pytest.raises(UserError, match=f"limit must be a whole number of windows >= 1, "
                                            f"got {limit!r}"):
            calibration_windows([clip], config, H, W, limit=limit)  # type: ignore[arg-type]
    for height, width in ((0, W), (H, 0), (H, 100), (-8, W)):
        with pytest.raises(UserError, match=f"input size {height}x{width}: height and width "
                                            "must be positive multiples of 8"):
            calibration_windows([clip], config, height, width)


def test_a_file_already_quantised_or_not_fp32_is_refused(fp32: Path, tmp_path: Path) -> None:
    """An INT8 file was quantised again (its QDQ pairs doubled, the error reported against an
    INT8 'reference'); an FP16 file failed inside the quantiser."""
    int8 = tmp_path / "int8.onnx"
    quantize_int8(fp32, int8, WINDOWS)
    with pytest.raises(UserError, match=re.escape(f"{int8} is not an FP32 export (precision "
                                                  "int8)")):
        quantize_int8(int8, tmp_path / "again.onnx", WINDOWS)
    proto = onnx.load(str(fp32))
    onnx.helper.set_model_props(proto, read_metadata(fp32) | {"precision": "fp16"})
    fp16 = tmp_path / "fp16.onnx"
    onnx.save(proto, str(fp16))
    with pytest.raises(UserError, match=r"is not an FP32 export \(precision fp16\)"):
        quantize_int8(fp16, tmp_path / "again.onnx", WINDOWS)
    assert _listing(tmp_path) == ["fp16.onnx", "fp32.onnx", "int8.onnx"]

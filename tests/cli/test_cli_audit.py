"""Bad input a second audit of the command line found (sixtieth session): argparse's errors in
one line, ``serve``'s options and start-up, ``track --ray``'s checks. One line on stderr, a
non-zero exit, nothing started or written."""

from pathlib import Path

import pytest

from ttball.cli import main


def _one_line(capsys: pytest.CaptureFixture[str], *argv: object, code: int = 2) -> str:
    got = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert got == code, err
    assert "Traceback" not in err and "\n" not in err, err
    return err


@pytest.mark.parametrize("argv", [("track", "x", "--batch", "abc"), ("serve", "--port", "abc"),
                                  ("track",), ("export", "onnx")])
def test_argparse_errors_are_one_line_and_name_the_help(capsys, argv) -> None:
    """argparse printed its whole usage (9-27 lines) before the error."""
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("ttball ") and "--help)" in err, err


@pytest.mark.parametrize(("options", "message"), [
    (("--decode-threads", 0), "--decode-threads must be >= 1"),
    (("--torch-threads", 0), "--torch-threads must be >= 1"),
    (("--max-delay-ms", "nan"), "--max-delay-ms must be >= 0"),
    (("--session-ttl", "nan"), "--session-ttl a number of seconds"),
    (("--graceful-timeout", "nan"), "--graceful-timeout must be"),
    (("--graceful-timeout", -1), "--graceful-timeout must be"),
    (("--weights", "nope.pt"), "checkpoint not found"),
    (("--backend", "tensorrt-fp16"), "backend tensorrt-fp16 is unavailable on cpu"),
])
def test_serve_refuses_bad_options_before_listening(capsys, no_app, options, message) -> None:
    err = _one_line(capsys, "serve", "--device", "cpu", "--backend", "eager-fp32", *options)
    assert message in err


def test_serve_refuses_an_empty_token_file(capsys, no_app, tmp_path) -> None:
    """It served on loopback with no token at all, though one was asked for."""
    empty = tmp_path / "token"
    empty.write_text("\n")
    assert "is empty" in _one_line(capsys, "serve", "--token-file", empty)


def test_serve_refuses_a_compile_cache_under_a_file(capsys, no_app, tmp_path) -> None:
    (tmp_path / "afile").write_text("x")
    err = _one_line(capsys, "serve", "--device", "cpu", "--backend", "eager-fp32",
                    "--compile-cache", tmp_path / "afile" / "cc")
    assert "--compile-cache" in err and "Not a directory" in err


def test_serve_exits_when_its_start_up_fails(capsys, monkeypatch) -> None:
    """What only trying finds (here a warm-up that raises) left a process that was never ready
    and never exited: a supervisor saw it alive. Now the server stops and the command exits 1,
    its reason on stderr."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from ttball.serve.worker import Worker

    def broken(self: Worker) -> None:
        raise RuntimeError("no such GPU")

    monkeypatch.setattr(Worker, "_load_and_warm", broken)
    assert main(["serve", "--device", "cpu", "--backend", "eager-fp32", "--port", "0",
                 "--log-level", "warning"]) == 1
    err = capsys.readouterr().err
    assert "ttball serve: start-up failed: RuntimeError: no such GPU" in err


def test_track_ray_checks_its_options_and_folder_before_ray(capsys, monkeypatch,
                                                          tmp_path) -> None:
    """``--threshold 7`` started Ray and failed each video; a video instead of a folder was
    found only after --backend auto's trials (minutes)."""
    from ttball.distributed import archive

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("Ray or the backend trials started")

    monkeypatch.setattr(archive, "_resolve_auto", refuse)
    monkeypatch.setattr(archive, "track_archive", refuse)
    folder = tmp_path / "videos"
    folder.mkdir()
    assert "--threshold" in _one_line(capsys, "track", folder, "--ray", "--out", tmp_path / "o",
                                      "--threshold", 7)
    assert "--dedup-ssim" in _one_line(capsys, "track", folder, "--ray", "--out",
                                       tmp_path / "o", "--dedup-ssim", 5)
    video = tmp_path / "a.mp4"
    video.write_bytes(b"x")
    assert "is not a folder" in _one_line(capsys, "track", video, "--ray", "--out",
                                          tmp_path / "o")
    assert not Path(tmp_path / "o").exists()


def _track_csv(path: Path, rows: list[str]) -> Path:
    path.write_text("frame,time_s,visible,x,y,blur_angle_deg,blur_length_px,score\n"
                    + "".join(r + "\n" for r in rows))
    return path


def test_eval_never_writes_its_report_over_an_input(capsys, tmp_path) -> None:
    """``--json gt.csv`` replaced the ground truth with the report (exit 0)."""
    rows = ["0,0,1,10,10,0,0,0.9", "1,0.03,0,0,0,0,0,0.1"]
    pred, gt = _track_csv(tmp_path / "pred.csv", rows), _track_csv(tmp_path / "gt.csv", rows)
    before = gt.read_text()
    assert "is one of the inputs" in _one_line(capsys, "eval", pred, gt, "--json", gt)
    assert gt.read_text() == before
    folder = tmp_path / "preds"
    folder.mkdir()
    _track_csv(folder / "gt.csv", rows)
    assert "is one of the inputs" in _one_line(capsys, "eval", folder, gt, "--json",
                                               folder / "gt.csv")


@pytest.mark.parametrize(("row", "message"), [("0,0,1,inf,10,0,0,0.9", "not a finite number"),
                                              ("0,0,1,10", "has 4 of the header's 8 columns")])
def test_eval_refuses_infinite_values_and_rows_cut_short(capsys, tmp_path, row,
                                                        message) -> None:
    good = _track_csv(tmp_path / "gt.csv", ["0,0,1,10,10,0,0,0.9"])
    bad = _track_csv(tmp_path / "pred.csv", [row])
    assert message in _one_line(capsys, "eval", bad, good)


def test_weights_with_nan_are_refused(tmp_path) -> None:
    """A checkpoint saved from a diverged run loaded, and every frame came out invisible."""
    import torch

    from ttball.errors import CheckpointError
    from ttball.model import BlurBall
    from ttball.model.weights import load_checkpoint

    state = BlurBall().state_dict()
    first = next(k for k, v in state.items() if v.is_floating_point())
    state[first][0] = float("nan")
    path = tmp_path / "nan.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="1 tensors hold NaN or infinite values"):
        load_checkpoint(path)


def test_bad_output_paths_fail_before_the_work(capsys, tmp_path, monkeypatch) -> None:
    """verify, fusion, export and loadtest found a folder where their file goes, or a path under
    a file, only after their work (fusion then left half its pair)."""
    from ttball.lab import fusion

    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the work ran before the output path was checked")

    monkeypatch.setattr(fusion, "run_fusion", no_work)
    out = tmp_path / "fusion"
    (out / "fusion.md").mkdir(parents=True)
    assert "is a folder" in _one_line(capsys, "fusion", "--out", out, "--device", "cpu")
    assert not (out / "fusion.json").exists()
    report = tmp_path / "verify"
    (report / "verify.md").mkdir(parents=True)
    assert "is a folder" in _one_line(capsys, "verify", "--backend", "eager-fp32", "--device",
                                      "cpu", "--out", report, "--quiet")
    assert not (report / "verify.json").exists()
    folder = tmp_path / "model.onnx"
    folder.mkdir()
    assert "is a folder" in _one_line(capsys, "export", "onnx", "--out", folder)
    (tmp_path / "afile").write_text("x")
    assert "cannot create output folder" in _one_line(
        capsys, "loadtest", "http://127.0.0.1:1", "--clips", tmp_path, "--out",
        tmp_path / "afile" / "r.json")


def test_auto_clips_that_do_not_decode_are_one_line(capsys, no_app, tmp_path) -> None:
    """Every candidate failed its trial on such a clip but the reference, which then won."""
    text = tmp_path / "text.mp4"
    text.write_text("not a video")
    assert "--auto-clips" in _one_line(capsys, "serve", "--device", "cpu", "--auto-clips", text)
    assert "--auto-clips" in _one_line(capsys, "track", tmp_path, "--auto-clips", text,
                                       "--out", tmp_path / "o")


@pytest.mark.parametrize("size", ["0x0", "-8x16", "72x-128"])
def test_export_int8_checks_the_size_before_calibrating(capsys, tmp_path, size) -> None:
    """Calibration ran first and failed in OpenCV's resize (a 33-line traceback)."""
    err = _one_line(capsys, "export", "onnx", "--int8", f"--size={size}", "--out",
                    tmp_path / "m.onnx")
    assert "positive multiples of 8" in err and not (tmp_path / "m.onnx").exists()


def test_export_calibration_windows_without_clips_is_refused(capsys, tmp_path) -> None:
    """It was ignored: the synthetic calibration used its own 16 windows."""
    err = _one_line(capsys, "export", "onnx", "--int8", "--calibration-windows", 4, "--out",
                    tmp_path / "m.onnx")
    assert "only applies with --calibrate" in err

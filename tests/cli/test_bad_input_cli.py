"""Bad input to the commands other than ``track``'s main path: one line on stderr, exit code 2,
nothing written or overwritten (found by a user audit: these printed Python tracebacks)."""

import importlib.util
from pathlib import Path

import pytest
from conftest import draw_clip

from ttball.cli import main
from ttball.frames import FrameSource


def _fails_in_one_line(capsys: pytest.CaptureFixture[str], *argv: object) -> str:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "Traceback" not in err and err.splitlines()[-1].startswith(f"ttball {argv[0]}: error:")
    return err


def test_running_out_of_memory_is_one_line_and_other_errors_still_raise(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench --size 80000x80000`` printed the allocator's traceback (a 230 GB input): an
    allocation that fails is one line, exit code 2; any other RuntimeError is not hidden."""
    import torch

    from ttball.backends import base

    def no_memory(*args: object, **kwargs: object) -> torch.Tensor:
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                           "can't allocate memory: you tried to allocate 230400000000 bytes.")

    monkeypatch.setattr(base.torch, "randn", no_memory)
    err = _fails_in_one_line(capsys, "bench", "--variants", "eager-fp32", "--batch", 1,
                             "--size", "80000x80000", "--device", "cpu", "--no-profile",
                             "--out", tmp_path / "b")
    assert err.splitlines()[-1].startswith(
        "ttball bench: error: out of memory (DefaultCPUAllocator: can't allocate memory: you "
        "tried to allocate 230400000000 bytes.)")

    def broken(*args: object, **kwargs: object) -> torch.Tensor:
        raise RuntimeError("a bug, not memory")

    monkeypatch.setattr(base.torch, "randn", broken)
    with pytest.raises(RuntimeError, match="a bug, not memory"):
        main(["bench", "--variants", "eager-fp32", "--batch", "1", "--size", "64x64",
              "--device", "cpu", "--no-profile", "--out", str(tmp_path / "c")])


def test_export_triton_refuses_a_missing_or_foreign_onnx_file_and_writes_no_repository(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    assert "ONNX file not found" in _fails_in_one_line(
        capsys, "export", "triton", "--out", repo, "--onnx", tmp_path / "nope.onnx")
    text = tmp_path / "text.onnx"
    text.write_text("hello world")
    assert "not an ONNX model" in _fails_in_one_line(
        capsys, "export", "triton", "--out", repo, "--onnx", text)
    assert not repo.exists()


def test_export_onnx_checks_the_opset_before_exporting(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for opset in (5, -1, 1000):
        assert "--opset must be between" in _fails_in_one_line(
            capsys, "export", "onnx", "--out", tmp_path / "x.onnx", "--opset", opset)
    assert not (tmp_path / "x.onnx").exists()
    a_file = tmp_path / "a_file"
    a_file.write_text("kept")
    assert "is not a folder" in _fails_in_one_line(capsys, "export", "onnx", "--out",
                                                   a_file / "x.onnx")
    assert a_file.read_text() == "kept"


def test_an_unknown_option_of_a_nested_command_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``export onnx --precision int9`` raised argparse's TypeError (a parser with commands of
    its own can't parse intermixed): now the nested command's usage error, exit code 2."""
    with pytest.raises(SystemExit) as exit_:
        main(["export", "onnx", "--out", str(tmp_path / "x.onnx"), "--precision", "int9"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.strip() == ("ttball export onnx: error: unrecognized arguments: "
                           "--precision int9 (see ttball export onnx --help)")
    assert not (tmp_path / "x.onnx").exists()


def test_eval_refuses_a_binary_file_and_a_folder_for_its_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "frame.csv"
    binary.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\xbe\xef")
    good = tmp_path / "track.csv"
    good.write_text("frame,time_s,visible,x,y,blur_angle_deg,blur_length_px,score\n"
                    "0,0.0,1,10,20,0,0,1.0\n")
    assert "not a CSV text file" in _fails_in_one_line(capsys, "eval", binary, good)
    (tmp_path / "report").mkdir()
    assert "is a folder" in _fails_in_one_line(capsys, "eval", good, good,
                                                "--json", tmp_path / "report")


def test_bench_that_measures_nothing_keeps_the_report_there(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    out.mkdir()
    (out / "bench.md").write_text("an earlier report\n")
    assert "no variant measured anything" in _fails_in_one_line(
        capsys, "bench", "--device", "cpu", "--variants", "cudagraph-fp32", "--quick",
        "--out", out)
    assert (out / "bench.md").read_text() == "an earlier report\n"
    assert sorted(p.name for p in out.iterdir()) == ["bench.md"]
    assert "--time-budget" in _fails_in_one_line(
        capsys, "bench", "--device", "cpu", "--variants", "eager-fp32", "--time-budget", "-5")
    (tmp_path / "taken" / "bench.json").mkdir(parents=True)
    assert "bench.json there is a folder" in _fails_in_one_line(
        capsys, "bench", "--device", "cpu", "--variants", "eager-fp32", "--quick",
        "--out", tmp_path / "taken")


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--lr", "-1", "--lr must be a finite number above 0"),
    ("--workers", "-1", "--workers must be 0"),
    ("--checkpoint-every", "0", "--checkpoint-every must be at least 1"),
    ("--synth-frames", "0", "--synth-frames must be at least 3"),
    ("--max-minutes", "-1", "--max-minutes must be 0"),
    ("--full-frame-every", "-1", "--full-frame-every must be 0"),
    ("--name", " ", "--name must be printable text"),
])
def test_train_checks_its_numbers_before_it_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str,
        message: str) -> None:
    out = tmp_path / "run"
    assert message in _fails_in_one_line(capsys, "train", "--out", out, "--device", "cpu",
                                         "--steps", 1, option, value)
    assert not out.exists()


def test_train_and_synth_refuse_what_they_cannot_write_or_seed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert "cannot create output folder" in _fails_in_one_line(
        capsys, "train", "--out", blocker / "run", "--device", "cpu", "--steps", 1)
    assert "--seed must be 0 or more" in _fails_in_one_line(
        capsys, "synth", tmp_path / "s", "--clips", 1, "--frames", 5, "--seed", -1)


def test_track_checks_its_options_and_outputs_before_it_writes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], clip: Path) -> None:
    assert "--dedup-ssim must be in (0, 1]" in _fails_in_one_line(
        capsys, "track", clip, "--dedup-ssim", 2, "--out", tmp_path / "a")
    assert "unknown backend 'nosuch'" in _fails_in_one_line(
        capsys, "track", clip, "--backend", "nosuch", "--out", tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    out = tmp_path / "c"
    (out / "overlay.mp4").mkdir(parents=True)
    (out / "track.csv").write_text("an earlier run\n")
    assert "overlay.mp4 is a folder" in _fails_in_one_line(
        capsys, "track", clip, "--overlay", "--backend", "eager-fp32", "--out", out)
    assert (out / "track.csv").read_text() == "an earlier run\n"


def test_a_video_cut_short_says_where_it_ended(tmp_path: Path) -> None:
    """A file cut mid-stream is tracked as far as it goes, and its info says where it ended
    (``track`` warns); a whole one ends where it says."""
    whole = tmp_path / "whole.avi"
    draw_clip(whole, frames=40, codec="MJPG")
    cut = tmp_path / "cut.avi"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    for path, ended in ((whole, None), (cut, "mid")):
        source = FrameSource(path)
        read = sum(1 for _ in source)
        assert source.info.frame_count == 40
        if ended is None:
            assert read == 40 and source.info.ended_at is None
        else:
            assert 3 <= read < 30 and source.info.ended_at == read


def test_a_failed_run_leaves_no_empty_output_folder_behind(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The folders a run created for its outputs go again when it fails (and stay empty);
    a folder that was there already stays."""
    import cv2
    import numpy as np

    assert "no variant measured anything" in _fails_in_one_line(
        capsys, "bench", "--device", "cpu", "--variants", "cudagraph-fp32", "--quick",
        "--out", tmp_path / "new" / "bench")
    assert not (tmp_path / "new").exists()
    images = tmp_path / "images"
    images.mkdir()
    cv2.imwrite(str(images / "0.png"), np.zeros((72, 128, 3), np.uint8))
    assert "at least 3 are needed" in _fails_in_one_line(
        capsys, "track", images, "--backend", "eager-fp32", "--device", "cpu",
        "--out", tmp_path / "out" / "run", "--quiet")
    assert not (tmp_path / "out").exists()
    (tmp_path / "kept").mkdir()
    _fails_in_one_line(capsys, "track", images, "--backend", "eager-fp32", "--device", "cpu",
                       "--out", tmp_path / "kept", "--quiet")
    assert (tmp_path / "kept").is_dir()


def test_serve_refuses_a_port_it_cannot_listen_on_before_loading_anything(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--port 99999`` was taken (uvicorn ran on something else), and a taken port was
    uvicorn's log line after the model's load, then "start-up failed: RuntimeError: shutting
    down during start-up": now one line, before the application is built."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import socket

    import ttball.serve.app

    def no_app(*args: object, **kwargs: object) -> None:
        raise AssertionError("the application was built before the port was checked")

    monkeypatch.setattr(ttball.serve.app, "create_app", no_app)
    for port in (99999, -1):
        assert f"--port must be in 0..65535, got {port}" in _fails_in_one_line(
            capsys, "serve", "--port", port)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = _fails_in_one_line(capsys, "serve", "--port", port)
        assert f"cannot listen on 127.0.0.1 port {port}:" in err
        if importlib.util.find_spec("ray") is not None:  # before a private cluster starts
            err = _fails_in_one_line(capsys, "serve", "--ray", "--port", port)
            assert f"cannot listen on 127.0.0.1 port {port}:" in err


def test_serve_refuses_flush_settings_that_do_not_go_together_in_one_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The flush's placement needs the overlap, and one flush cannot be on two threads: one
    line each, before anything is built."""
    pytest.importorskip("fastapi")
    import ttball.serve.app

    def no_app(*args: object, **kwargs: object) -> None:
        raise AssertionError("the application was built before the settings were checked")

    monkeypatch.setattr(ttball.serve.app, "create_app", no_app)
    err = _fails_in_one_line(capsys, "serve", "--device-pipeline", "--flush-after-push")
    assert "--flush-after-push needs --pipeline-overlap" in err
    err = _fails_in_one_line(capsys, "serve", "--device-pipeline", "--pipeline-overlap",
                             "--no-carry-windows", "--flush-thread", "--flush-after-push")
    assert "--flush-after-push and --flush-thread are exclusive" in err
    err = _fails_in_one_line(capsys, "serve", "--decode-on-arrival")
    assert "--decode-on-arrival needs --device-pipeline" in err

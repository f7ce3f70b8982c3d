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


@pytest.fixture
def no_app(monkeypatch):
    """serve's checks must fail before the application is built or the port taken."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import ttball.serve.app

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("got past the checks")

    monkeypatch.setattr(ttball.serve.app, "create_app", refuse)
    monkeypatch.setattr(ttball.serve.app, "listen_socket", refuse)


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

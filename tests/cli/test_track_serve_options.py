"""Bad input a third audit of ``track`` and ``serve`` found: ``track --ray`` on a folder without
videos, ``track``'s cheap input checks after minutes of ``--backend auto``'s trials, and options
that did nothing where their neighbours are errors. One line on stderr, exit code 2, nothing
started or written."""

from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import SMALL, draw_clip

from ttball.cli import main


def _one_line(capsys: pytest.CaptureFixture[str], *argv: object) -> str:
    got = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert got == 2, err
    assert "Traceback" not in err and "\n" not in err, err
    assert err.startswith(f"ttball {argv[0]}: error: "), err
    return err


def _images(folder: Path, count: int) -> Path:
    folder.mkdir()
    for i in range(count):
        cv2.imwrite(str(folder / f"{i:04d}.png"), np.zeros((*SMALL, 3), np.uint8))
    return folder


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """``track --ray``'s checks must fail before --backend auto's trials or Ray start."""
    from ttball.distributed import archive

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("Ray or the backend trials started")

    monkeypatch.setattr(archive, "_resolve_auto", refuse)
    monkeypatch.setattr(archive, "_connect", refuse)


@pytest.mark.parametrize("content", ["nothing", "images", "text"])
def test_track_ray_refuses_a_folder_without_videos(capsys, no_ray, tmp_path, content) -> None:
    """It exited 0 with "videos 0 (0 tracked, ...)" and wrote archive.json."""
    folder = tmp_path / "in"
    if content == "images":
        _images(folder, 3)
    else:
        folder.mkdir()
        if content == "text":
            (folder / "notes.txt").write_text("not a video")
    out = tmp_path / "out"
    err = _one_line(capsys, "track", folder, "--ray", "--device", "cpu", "--out", out)
    assert f"archive {folder} holds no videos (.avi, .mkv, .mov, .mp4, .webm)" in err
    assert ("without --ray" in err) == (content == "images")  # the way to track the images
    assert not out.exists()


def test_track_archive_refuses_a_folder_without_videos(tmp_path) -> None:
    """The library call wrote an empty archive.json too."""
    from ttball.distributed import track_archive
    from ttball.errors import UserError

    with pytest.raises(UserError, match="holds no videos"):
        track_archive(tmp_path, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("frames", [1, 2])
@pytest.mark.parametrize("kind", ["video", "images"])
def test_track_checks_the_frames_before_choosing_a_backend(capsys, monkeypatch, tmp_path,
                                                          small_weights, kind, frames) -> None:
    """With --backend auto, 1 or 2 frames printed "choosing the fastest verified backend..."
    and failed minutes later; --backend eager-fp32 failed at once."""
    from ttball.backends import auto

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the backend trials started")

    monkeypatch.setattr(auto, "choose_backend", refuse)
    if kind == "video":
        source = tmp_path / "short.mp4"
        draw_clip(source, frames=frames, size=(SMALL[1], SMALL[0]))
    else:
        source = _images(tmp_path / "imgs", frames)
    out = tmp_path / "out"
    err = _one_line(capsys, "track", source, "--device", "cpu", "--weights", small_weights,
                    "--out", out)
    assert err.endswith(f"{source}: {frames} readable frame(s); at least 3 are needed"), err
    assert not out.exists()


def test_track_reads_only_the_first_frames_before_tracking(monkeypatch, tmp_path,
                                                          small_weights) -> None:
    """The early check reads 3 frames, not the whole video; tracking then reads them all."""
    from ttball import frames as frames_module

    read: list[int] = []
    original = frames_module.FrameSource._iter_video

    def counting(self):  # type: ignore[no-untyped-def]
        for frame in original(self):
            read.append(frame.index)
            yield frame

    monkeypatch.setattr(frames_module.FrameSource, "_iter_video", counting)
    clip = tmp_path / "c.mp4"
    draw_clip(clip, frames=9, size=(SMALL[1], SMALL[0]))
    assert main(["track", str(clip), "--backend", "eager-fp32", "--device", "cpu", "--quiet",
                 "--weights", str(small_weights), "--out", str(tmp_path / "o")]) == 0
    assert read == [0, 1, 2, *range(9)]


@pytest.mark.parametrize(("options", "message"), [
    (("--backend", "eager-fp32", "--reselect"), "--reselect only applies with --backend auto"),
    (("--address", "auto"), "--address needs --ray"),
    (("--ray", "--backend", "eager-fp32", "--reselect"),
     "--reselect only applies with --backend auto"),
    (("--ray", "--backend", "eager-fp32", "--auto-clips", "CLIP"),
     "--auto-clips only applies with --backend auto"),
    (("--ray", "--backend", "eager-fp32", "--compile-cache", "CACHE"),
     "--compile-cache is not supported with --ray"),
])
def test_track_refuses_options_that_would_do_nothing(capsys, no_ray, monkeypatch, tmp_path,
                                                     options, message) -> None:
    """They were ignored (exit 0) where their neighbours (--auto-clips without auto, --overlay
    with --ray) are errors."""
    from ttball.cli import track

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("tracking started")

    monkeypatch.setattr(track, "prepare_out_dir", refuse)
    folder = tmp_path / "in"
    folder.mkdir()
    clip = folder / "c.mp4"
    draw_clip(clip, frames=4, size=(SMALL[1], SMALL[0]))
    given = [{"CLIP": clip, "CACHE": tmp_path / "cache"}.get(o, o) for o in options]
    source = folder if "--ray" in options else clip
    err = _one_line(capsys, "track", source, "--device", "cpu", *given, "--out", tmp_path / "o")
    assert message in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "cache").exists()


def test_track_ray_backend_auto_verifies_on_the_auto_clips(monkeypatch, tmp_path) -> None:
    """--ray chose --backend auto on the bundled clips, whatever --auto-clips named."""
    import argparse

    from ttball.backends import auto
    from ttball.distributed import archive

    asked: dict[str, object] = {}

    def choose(model, device, **options):  # type: ignore[no-untyped-def]
        asked.update(options)
        return auto.Choice("eager-fp32", "test")

    monkeypatch.setattr(auto, "choose_backend", choose)
    clip = tmp_path / "c.mp4"
    args = argparse.Namespace(backend="auto", quiet=True, weights=None, reselect=True,
                              auto_clips=[str(clip)])
    assert archive._resolve_auto(args, "cpu") == "eager-fp32"
    assert asked["clips"] == [str(clip)] and asked["reselect"] is True


@pytest.fixture
def no_server(no_app: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """serve's checks must fail before the application is built, the port taken or Ray run."""
    from conftest import refuse

    import ttball.distributed.serve

    monkeypatch.setattr(ttball.distributed.serve, "run_serve", refuse)


@pytest.mark.parametrize("options", [
    ("--replicas", 2), ("--replicas", 1), ("--autoscale", "1:2"), ("--gpus-per-replica", 0),
    ("--cpus-per-replica", 1), ("--mps-sm-percent", 50), ("--address", "auto"),
    ("--direct-streams",),
])
def test_serve_refuses_ray_options_without_ray(capsys, no_server, options) -> None:
    """``--replicas 2`` or ``--autoscale 1:2`` without --ray started one server, as if not
    given; now each Ray-only option needs --ray, as --direct-streams did."""
    err = _one_line(capsys, "serve", "--device", "cpu", "--backend", "eager-fp32", *options)
    assert f"{options[0]} needs --ray" in err


def test_serve_refuses_replicas_with_autoscale(capsys, no_server) -> None:
    """``--ray --replicas 4 --autoscale 1:2`` scaled 1..2: --autoscale overrode --replicas."""
    for replicas in (4, 1):
        err = _one_line(capsys, "serve", "--ray", "--replicas", replicas, "--autoscale", "1:2")
        assert "--replicas and --autoscale are exclusive" in err


def test_serve_ray_options_keep_their_defaults() -> None:
    """Given nothing, --ray's settings are those it always had (1 replica, 1 CPU each)."""
    import argparse

    from ttball.cli.serve import add_arguments
    from ttball.distributed.serve import settings_from

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = settings_from(parser.parse_args(["--ray", "--device", "cpu"]))
    assert (settings.replicas, settings.autoscale, settings.cpus_per_replica,
            settings.gpus_per_replica) == (1, None, 1.0, 0.0)
    settings = settings_from(parser.parse_args(["--ray", "--device", "cpu", "--replicas", "3",
                                                "--cpus-per-replica", "2"]))
    assert (settings.replicas, settings.cpus_per_replica) == (3, 2.0)

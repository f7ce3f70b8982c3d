"""End to end: ``ttball track`` on clips drawn by the tests, and its error paths."""

import csv
import json
import os
from pathlib import Path

import cv2
import pytest
from conftest import draw_clip

from ttball.cli import main


def run_cli(*args: str) -> int:
    backend = [] if "--backend" in args else ["--backend", "eager-fp32"]  # auto: tests/backends
    return main(["track", *map(str, args), *backend, "--quiet"])


def test_track_writes_csv_json_and_overlay(tmp_path, clip, small_weights) -> None:
    out = tmp_path / "out"
    assert run_cli(clip, "--weights", small_weights, "--out", out, "--overlay", "--device", "cpu") == 0
    rows = list(csv.DictReader((out / "track.csv").open()))
    assert list(rows[0]) == ["frame", "time_s", "visible", "x", "y", "blur_angle_deg",
                             "blur_length_px", "score"]
    assert [int(r["frame"]) for r in rows] == list(range(12))
    meta = json.loads((out / "track.json").read_text())
    assert meta["summary"]["frames"] == 12
    assert meta["settings"]["step"] == 3 and meta["weights"]["name"] == "test-small"
    cap = cv2.VideoCapture(str(out / "overlay.mp4"))
    assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == 12
    fourcc = int(cap.get(cv2.CAP_PROP_FOURCC)).to_bytes(4, "little").decode().lower()
    assert fourcc in ("avc1", "h264")  # PyAV is a dependency: browsers play the overlay
    assert not [p for p in os.listdir(out) if p.startswith(".")]  # no temporary files left


def test_blurball_csv_format_and_step1_batch(tmp_path, clip, small_weights) -> None:
    out = tmp_path / "o"
    assert run_cli(clip, "--weights", small_weights, "--out", out, "--csv-format", "blurball",
                   "--step", "1", "--batch", "4") == 0
    rows = list(csv.DictReader((out / "track.csv").open()))
    assert list(rows[0]) == ["Frame", "X", "Y", "Visibility", "L", "Theta"]
    assert len(rows) == 12


def test_image_folder_with_a_corrupt_image(tmp_path, small_weights) -> None:
    folder = tmp_path / "imgs"
    folder.mkdir()
    src = cv2.VideoCapture(str(_clip(tmp_path)))
    for i in range(6):
        _, img = src.read()
        cv2.imwrite(str(folder / f"{i:04d}.jpg"), img)
    (folder / "0003.jpg").write_bytes(b"\xff\xd8garbage")
    out = tmp_path / "out"
    assert run_cli(folder, "--weights", small_weights, "--out", out) == 0
    meta = json.loads((out / "track.json").read_text())
    assert meta["source"]["corrupt_frames"] == [3]
    assert [int(r["frame"]) for r in csv.DictReader((out / "track.csv").open())] == [0, 1, 2, 4, 5]


def _clip(tmp_path: Path, frames: int = 12) -> Path:
    path = tmp_path / f"c{frames}.mp4"
    draw_clip(path, frames=frames)
    return path


def _error(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ttball")]
    assert len(err) == 1, err
    return err[0]


def test_missing_file(tmp_path, capsys) -> None:
    assert run_cli(tmp_path / "missing.mp4") == 2
    assert "no such file or folder" in _error(capsys)


def test_not_a_video(tmp_path, capsys) -> None:
    bad = tmp_path / "notes.mp4"
    bad.write_text("hello")
    assert run_cli(bad) == 2
    assert "not a video OpenCV can decode" in _error(capsys)


def test_not_a_video_is_one_line_on_stderr(tmp_path) -> None:
    """FFmpeg's own line ("moov atom not found") no longer comes before ours (a process of its
    own: OpenCV's FFmpeg log level is read once a process)."""
    import subprocess
    import sys

    bad = tmp_path / "notes.mp4"
    bad.write_text("hello")
    env = {k: v for k, v in os.environ.items() if k != "OPENCV_FFMPEG_LOGLEVEL"}
    done = subprocess.run([sys.executable, "-m", "ttball", "track", str(bad), "--backend",
                           "eager-fp32", "--device", "cpu", "--quiet"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"ttball track: error: {bad}: not a video OpenCV can decode"]


def test_too_few_frames(tmp_path, small_weights, capsys) -> None:
    assert run_cli(_clip(tmp_path, 2), "--weights", small_weights, "--out", tmp_path / "o") == 2
    assert "at least 3 are needed" in _error(capsys)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_output_as_user(tmp_path, clip, capsys) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    assert run_cli(clip, "--out", ro / "sub") == 2
    assert "cannot create output folder" in _error(capsys)


def test_output_path_is_a_file(tmp_path, clip, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert run_cli(clip, "--out", blocker / "sub") == 2
    assert "cannot create output folder" in _error(capsys)


def test_bad_weights_one_line(tmp_path, clip, capsys) -> None:
    junk = tmp_path / "w.pt"
    junk.write_bytes(b"junk")
    assert run_cli(clip, "--weights", junk, "--out", tmp_path / "o") == 2
    assert "cannot read checkpoint" in _error(capsys)


def test_bad_batch_and_backend(tmp_path, clip, small_weights, capsys) -> None:
    assert run_cli(clip, "--batch", "0", "--out", tmp_path / "o") == 2
    assert "--batch must be at least 1" in _error(capsys)
    assert run_cli(clip, "--weights", small_weights, "--backend", "nope", "--out", tmp_path / "o") == 2
    assert "unknown backend 'nope'" in _error(capsys)


def test_failed_run_leaves_previous_csv_intact(tmp_path, clip, small_weights, capsys) -> None:
    out = tmp_path / "out"
    assert run_cli(clip, "--weights", small_weights, "--out", out) == 0
    before = (out / "track.csv").read_bytes()
    assert run_cli(_clip(tmp_path, 2), "--weights", small_weights, "--out", out) == 2
    assert (out / "track.csv").read_bytes() == before


def test_compile_cache_reaches_a_disk_cache_backend_and_the_compilers(
        tmp_path, clip, small_weights, monkeypatch, cache_backends) -> None:
    """``track --compile-cache DIR``: a backend tagged ``disk-cache`` gets ``cache_dir`` DIR
    (its tuning records there), torch.compile's inductor and Triton caches go under DIR unless
    the environment names them, as ``serve --compile-cache``; other backends get nothing."""
    for name in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):  # restored after the test
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    compiled = tmp_path / "compiled"
    for backend in ("test-cached", "test-plain"):
        assert run_cli(clip, "--weights", small_weights, "--out", tmp_path / backend,
                       "--device", "cpu", "--backend", backend,
                       "--compile-cache", compiled) == 0
    assert cache_backends == {"test-cached": {"cache_dir": str(compiled.resolve())},
                              "test-plain": {}}
    assert os.environ["TRITON_CACHE_DIR"] == str(compiled.resolve() / "triton")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(compiled.resolve() / "inductor")

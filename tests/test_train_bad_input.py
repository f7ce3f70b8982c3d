"""Bad input to ``ttball train``: one line on stderr, exit code 2, nothing overwritten, never a
hang (found by a user audit: these hung, printed tracebacks or wrote NaN weights)."""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from conftest import draw_clip

from ttball.cli import main
from ttball.errors import UserError
from ttball.model import BlurBall
from ttball.results import FrameResult, write_track_csv
from ttball.train import TrainConfig, WindowStream, train
from ttball.train_data import loader

# Tiny runs: one 16x16 crop a step from 3-frame synthetic clips, in this process.
QUICK = ["--steps", "1", "--batch", "1", "--crop", "16x16", "--full-frame-every", "0",
         "--workers", "0", "--synth-frames", "3", "--windows-per-clip", "1", "--device", "cpu",
         "--quiet"]


def _fails_in_one_line(capsys: pytest.CaptureFixture[str], *argv: object) -> str:
    code = main(["train", *(str(a) for a in argv)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("ttball train: error: "), err
    return err


@contextmanager
def _no_hang(seconds: int = 60) -> Iterator[None]:
    """A run still going after ``seconds`` fails the test instead of hanging it."""
    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s: a hang")

    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def _labels(path: Path, frames: int) -> None:
    write_track_csv(path, [FrameResult(i, i / 30, True, x=20 + 25 * i, y=90, blur_length_px=4)
                           for i in range(frames)])


def _clip(folder: Path, name: str, frames: int = 6, labels: int | None = None) -> Path:
    """A labelled clip ``folder/name.mp4`` of ``frames`` frames, with ``labels`` CSV rows."""
    folder.mkdir(exist_ok=True)
    draw_clip(folder / f"{name}.mp4", frames=frames)
    _labels(folder / f"{name}.csv", frames if labels is None else labels)
    return folder / f"{name}.mp4"


def _unreadable(folder: Path, name: str) -> Path:
    """A labelled clip whose video is text: OpenCV decodes no frame of it."""
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.mp4").write_text("hello\n")
    _labels(folder / f"{name}.csv", 6)
    return folder / f"{name}.mp4"


# 1. Labelled clips that can't be used: named before training, in the main process.

def test_an_unreadable_labelled_clip_is_named_not_a_hang(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With --no-synth the stream skipped the clip forever, at 100 % CPU."""
    video = _unreadable(tmp_path / "clips", "c")
    with _no_hang():
        err = _fails_in_one_line(capsys, "--out", tmp_path / "run", "--no-synth",
                                 "--clips", tmp_path / "clips", *QUICK)
    assert f"{video}: not a video OpenCV can decode" in err
    assert not (tmp_path / "run").exists()


def test_an_unreadable_clip_beside_usable_ones_is_an_error_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With synthetic clips (or other labelled ones) the run trained on less, silently."""
    _clip(tmp_path / "clips", "a")
    video = _unreadable(tmp_path / "clips", "b")
    with _no_hang():
        err = _fails_in_one_line(capsys, "--out", tmp_path / "run", "--clips",
                                 tmp_path / "clips", *QUICK)
    assert str(video) in err and not (tmp_path / "run").exists()


def test_a_synth_data_set_missing_clips_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A `ttball synth` folder whose manifest lists a clip that is gone (deleted, or a run cut
    while it replaced the clips) trained on the clips left, silently."""
    from ttball.synth import ClipConfig, write_dataset
    from ttball.synth.dataset import MANIFEST, REPLACING

    clips = tmp_path / "clips"
    write_dataset(clips, clips=2, seed=0, config=ClipConfig(size=(64, 64), frames=3, plain=True))
    (clips / "clip_0001.mp4").unlink()
    err = _fails_in_one_line(capsys, "--out", tmp_path / "run", "--no-synth", "--clips", clips,
                             *QUICK)
    assert "not a complete synthetic data set" in err and "clip_0001.mp4" in err
    (clips / MANIFEST).rename(clips / REPLACING)  # as a run cut while swapping clips leaves it
    err = _fails_in_one_line(capsys, "--out", tmp_path / "run", "--no-synth", "--clips", clips,
                             *QUICK)
    assert f"no {MANIFEST}" in err and not (tmp_path / "run").exists()


def test_a_clip_with_fewer_labels_than_a_window_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _clip(tmp_path / "clips", "c", labels=2)
    with _no_hang():
        err = _fails_in_one_line(capsys, "--out", tmp_path / "run", "--no-synth",
                                 "--clips", tmp_path / "clips", *QUICK)
    assert f"{tmp_path / 'clips' / 'c.csv'}: 2 labelled frames" in err


def _truncated(folder: Path) -> Path:
    """A clip that opens and declares 12 frames, of which fewer than 3 decode."""
    folder.mkdir()
    whole, cut = folder / "whole.mkv", folder / "c.mkv"
    writer = cv2.VideoWriter(str(whole), cv2.CAP_FFMPEG, cv2.VideoWriter_fourcc(*"MJPG"), 30,
                             (64, 48))
    for i in range(12):
        img = np.full((48, 64, 3), (40, 90, 30), np.uint8)
        writer.write(cv2.circle(img, (5 + 4 * i, 24), 3, (255, 255, 255), -1))
    writer.release()
    data = whole.read_bytes()
    whole.unlink()
    for end in range(len(data) // 10, len(data) // 2, 64):
        cut.write_bytes(data[:end])
        cap, decoded = cv2.VideoCapture(str(cut)), 0
        while cap.read()[0]:
            decoded += 1
        cap.release()
        if decoded in (1, 2):
            _labels(folder / "c.csv", 12)
            return cut
    pytest.skip("this OpenCV can't write a clip that decodes in part when cut")


def test_a_clip_cut_short_is_named_from_a_worker_in_one_line(tmp_path: Path) -> None:
    """Its header passes the check before training; the worker that decodes it raises, and the
    DataLoader's re-raise (the worker's whole traceback) comes back as the one line."""
    video = _truncated(tmp_path / "clips")
    cfg = TrainConfig(clips=(str(tmp_path / "clips"),), synth=False, windows_per_clip=1)
    batches = loader(cfg, (16, 16), 1, 1)
    with _no_hang(), pytest.raises(UserError) as caught:
        next(batches)
    assert len(str(caught.value).splitlines()) == 1, caught.value
    assert str(caught.value).startswith(f"--clips: {video}: ")
    assert "frames could be decoded" in str(caught.value)


# 2. A last.pt that is not a training state: one line naming it, nothing written.

def _foreign_states() -> dict[str, object]:
    model = BlurBall()
    state = {"model": model.state_dict(), "optimizer": {}, "step": 1, "history": []}
    reshaped = {**state["model"], "conv1.weight": torch.zeros(3, 3, 3, 3)}  # type: ignore[dict-item]
    return {"empty": b"", "random bytes": bytes(range(256)) * 4,
            "a plain state dict": model.state_dict(), "a list": [1, 2],
            "a mis-shaped model": {**state, "model": reshaped}}


@pytest.mark.parametrize("kind, why", [
    ("empty", "the file is empty"),
    ("random bytes", "not a PyTorch checkpoint"),
    ("a plain state dict", "not a ttball training state"),
    ("a list", "not a ttball training state"),
    ("a mis-shaped model", "mis-shaped (conv1.weight (3, 3, 3, 3) != (64, 9, 3, 3))"),
])
def test_resuming_from_a_foreign_last_pt_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, why: str) -> None:
    out = tmp_path / "run"
    out.mkdir()
    last, weights = out / "last.pt", out / "weights.safetensors"
    state = _foreign_states()[kind]
    if isinstance(state, bytes):
        last.write_bytes(state)
    else:
        torch.save(state, last)
    weights.write_bytes(b"earlier work")
    before = last.read_bytes()
    err = _fails_in_one_line(capsys, "--out", out, *QUICK)
    assert err.startswith(f"ttball train: error: cannot resume from {last}: ") and why in err
    assert last.read_bytes() == before and weights.read_bytes() == b"earlier work"


# 3. Crops: any size the option takes, up to the frames, trains; bigger is one line.

def test_the_smallest_crop_samples_around_the_ball() -> None:
    """16 px crops failed at random (``rng.integers(8, 8)``), when a window held the ball."""
    cfg = TrainConfig(synth_frames=5, windows_per_clip=16, seed=3)
    windows = [w for _, w in zip(range(48), WindowStream(cfg, (16, 16)))]
    assert all(w.x.shape == (9, 16, 16) for w in windows)
    assert any(w.targets[1, 0] > 0 for w in windows)  # the path that failed: a visible ball


@pytest.mark.parametrize("crop", ["1024x1024", "296x512", "288x520"])
def test_a_crop_larger_than_the_frames_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], crop: str) -> None:
    err = _fails_in_one_line(capsys, "--out", tmp_path / "run", *QUICK, "--crop", crop)
    assert f"--crop {crop}:" in err and "288x512" in err
    assert not (tmp_path / "run").exists()


# 4. Learning rates that can only diverge, and a run that diverges anyway.

@pytest.mark.parametrize("option, value", [
    ("--lr", "inf"), ("--lr", "nan"), ("--lr", "0"), ("--lr", "-1e-3"),
    ("--max-minutes", "inf"), ("--max-minutes", "nan"), ("--max-minutes", "-1"),
])
def test_float_options_must_be_finite(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str) -> None:
    err = _fails_in_one_line(capsys, "--out", tmp_path / "run", *QUICK, f"{option}={value}")
    assert f"{option} must be" in err and not (tmp_path / "run").exists()


@pytest.mark.parametrize("steps", [2, 3])  # a checkpoint of NaN weights; a NaN loss read back
def test_a_diverging_run_keeps_the_earlier_weights(tmp_path: Path, steps: int) -> None:
    """``--lr inf`` exited 0 and replaced good weights with NaN ones. A run that diverges
    (the CLI now refuses inf; a library caller need not) fails, and overwrites nothing."""
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *QUICK]) == 0
    saved = {p.name: p.read_bytes() for p in out.iterdir()}
    cfg = TrainConfig(out=str(out), steps=steps, batch=1, crop=(16, 16), full_frame_every=0,
                      workers=0, synth_frames=3, windows_per_clip=1, lr=math.inf)
    with pytest.raises(UserError, match=r"^training diverged at step \d"):
        train(cfg, device="cpu", progress=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == saved


# 5. Seeds: numpy's generators take none below 0, torch's none from 2**64; refused up front.

@pytest.mark.parametrize("option, value, message", [
    ("--seed", "-1", "--seed must be 0 or more, got -1"),
    ("--synth-seed", "-1", "--synth-seed must be 0 or more, got -1"),
    ("--seed", str(2**64), f"--seed must be below 2**64, got {2**64}"),
])
def test_seeds_out_of_range_are_one_line_before_any_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str,
        message: str) -> None:
    """``--seed -1`` raised numpy's ValueError in a data worker (a traceback) and left an empty
    --out folder; ``--seed 2**64`` raised torch's."""
    out = tmp_path / "run"
    with _no_hang():
        err = _fails_in_one_line(capsys, "--out", out, *QUICK, "--workers", "1", option, value)
    assert err == f"ttball train: error: {message}"
    assert not out.exists()


def test_the_largest_seeds_train(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *QUICK, "--seed", str(2**64 - 1),
                 "--synth-seed", str(2**70)]) == 0
    assert (out / "weights.safetensors").is_file()


# 6. Resuming: last.pt in --out continues that run; --init would start another.

def test_init_into_a_folder_with_a_run_to_resume_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run resumed from last.pt, ignored --init, and train.json recorded the --init."""
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *QUICK]) == 0
    saved = {p.name: p.read_bytes() for p in out.iterdir()}
    init = tmp_path / "init.safetensors"
    init.write_bytes(saved["weights.safetensors"])
    err = _fails_in_one_line(capsys, "--out", out, *QUICK, "--steps", "2", "--init", init)
    assert err == (f"ttball train: error: --out {out} holds a run to resume (last.pt); --init "
                   "starts a new one: choose a new --out or leave out --init")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == saved


def test_train_json_says_from_which_step_a_resumed_run_used_its_settings(
        tmp_path: Path) -> None:
    """Settings given to a resumed run (--lr, --batch, ...) apply from the step it resumed at:
    train.json's config showed them as though the whole run had used them."""
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *QUICK]) == 0
    assert json.loads((out / "train.json").read_text())["resumed_from_step"] == 0
    assert main(["train", "--out", str(out), *QUICK, "--steps", "2", "--lr", "1e-3"]) == 0
    run = json.loads((out / "train.json").read_text())
    assert run["resumed_from_step"] == 1 and run["steps"] == 2 and run["config"]["lr"] == 1e-3


def test_a_resumed_run_keeps_the_init_it_was_started_from(tmp_path: Path) -> None:
    """train.json and the weights' metadata of a resumed run said init null: the first part's
    --init is not given again (it is refused then), so it was lost."""
    from ttball.model.weights import load_checkpoint

    first = tmp_path / "first"
    assert main(["train", "--out", str(first), *QUICK]) == 0
    init = first / "weights.safetensors"
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *QUICK, "--init", str(init)]) == 0
    assert json.loads((out / "train.json").read_text())["config"]["init"] == str(init)
    assert main(["train", "--out", str(out), *QUICK, "--steps", "2"]) == 0
    run = json.loads((out / "train.json").read_text())
    assert run["resumed_from_step"] == 1 and run["config"]["init"] == str(init)
    assert "init" not in run  # once, in the config
    assert load_checkpoint(out / "weights.safetensors")[1].metrics["train"]["init"] == str(init)


# 7. A batch that can't fit in memory: refused with the estimate, not drawn for minutes.

@pytest.mark.parametrize("data_only", [True, False])
def test_a_batch_too_large_for_memory_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], data_only: bool) -> None:
    from ttball.hostmem import available_memory

    if available_memory() is None:
        pytest.skip("this system does not say how much memory is available")
    out = tmp_path / "run"
    with _no_hang(30):
        err = _fails_in_one_line(capsys, "--out", out, *QUICK, "--batch", "100000000",
                                 *(["--data-only"] if data_only else []))
    assert "--batch 100000000" in err and "of memory" in err and "available" in err
    assert not out.exists()

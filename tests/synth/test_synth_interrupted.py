"""``ttball synth`` cut short or refused: a data set folder never looks complete when it isn't,
an earlier data set is never mixed with a new one, and bad counts fail at once in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ttball.cli import COMMANDS, main
from ttball.errors import UserError
from ttball.synth import ClipConfig, read_manifest, write_dataset
from ttball.synth import dataset as ds

OLD = ClipConfig(size=(64, 64), fps=30.0, frames=3, plain=True)
NEW = ClipConfig(size=(96, 64), fps=25.0, frames=4, plain=True)


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too), by relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _interrupt_at_clip(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    """Ctrl-C while clip ``k`` (0-based) of the next run renders."""
    real, calls = ds._make_clip, []

    def make_clip(job):  # type: ignore[no-untyped-def]
        calls.append(job)
        if len(calls) > k:
            raise KeyboardInterrupt
        return real(job)

    monkeypatch.setattr(ds, "_make_clip", make_clip)


@pytest.fixture
def synth_cli(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setitem(COMMANDS, "synth", ("ttball.cli.synth", "synthetic clips"))
    return main


def test_an_interrupted_run_leaves_the_earlier_data_set_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dataset(tmp_path, clips=3, seed=0, config=OLD)
    before = _files(tmp_path)
    _interrupt_at_clip(monkeypatch, 2)  # two new clips rendered, the third cut short
    with pytest.raises(KeyboardInterrupt):
        write_dataset(tmp_path, clips=3, seed=7, config=NEW)
    assert _files(tmp_path) == before  # no new clip moved in, no staging folder left
    assert read_manifest(tmp_path)["seed"] == 0


def test_the_cli_interrupted_over_a_data_set_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synth_cli, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["synth", str(tmp_path), "--clips", "2", "--frames", "3", "--size", "64x64",
            "--fps", "30", "--workers", "1", "--plain"]
    assert synth_cli(argv) == 0
    before = _files(tmp_path)
    capsys.readouterr()
    _interrupt_at_clip(monkeypatch, 1)
    assert synth_cli([*argv, "--seed", "7"]) == 130
    err = capsys.readouterr().err
    assert err.endswith("ttball synth: interrupted\n") and "[1/2] clip_0000" in err
    assert _files(tmp_path) == before


def test_a_run_cut_while_its_clips_move_in_leaves_no_manifest_and_can_be_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dataset(tmp_path, clips=3, seed=0, config=OLD)
    real = ds.write_json

    def cut_before_the_manifest(path, payload):  # type: ignore[no-untyped-def]
        if Path(path).name == ds.MANIFEST:
            raise KeyboardInterrupt
        real(path, payload)

    monkeypatch.setattr(ds, "write_json", cut_before_the_manifest)
    with pytest.raises(KeyboardInterrupt):
        write_dataset(tmp_path, clips=2, seed=7, config=NEW)
    # the clips are a mix of the two runs: the folder must not look complete
    assert not (tmp_path / ds.MANIFEST).exists()
    with pytest.raises(UserError, match="not a complete synthetic data set") as err:
        read_manifest(tmp_path)
    assert "\n" not in str(err.value)
    # the same command again replaces them all: the journal names them as ttball's own
    monkeypatch.setattr(ds, "write_json", real)
    write_dataset(tmp_path, clips=2, seed=7, config=NEW)
    assert read_manifest(tmp_path)["seed"] == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "clip_0000.csv", "clip_0000.mp4", "clip_0001.csv", "clip_0001.mp4", "manifest.json"
    ]


def test_a_smaller_data_set_removes_the_earlier_ones_extra_clips(tmp_path: Path) -> None:
    write_dataset(tmp_path, clips=3, seed=0, config=OLD)
    manifest = write_dataset(tmp_path, clips=1, seed=5, config=OLD)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "clip_0000.csv", "clip_0000.mp4", "manifest.json"
    ]
    assert read_manifest(tmp_path) == json.loads(json.dumps(manifest))


def test_clip_files_that_no_manifest_lists_are_not_overwritten(tmp_path: Path) -> None:
    mine = tmp_path / "clip_0001.csv"
    mine.write_text("someone's labels\n")
    with pytest.raises(UserError, match="no manifest.json there lists") as err:
        write_dataset(tmp_path, clips=2, seed=0, config=OLD)
    assert "\n" not in str(err.value)
    assert _files(tmp_path) == {"clip_0001.csv": b"someone's labels\n"}


def test_a_manifest_that_is_not_ours_is_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text('{"model": "something else"}\n')
    with pytest.raises(UserError, match="not a complete ttball synth manifest"):
        write_dataset(tmp_path, clips=1, seed=0, config=OLD)
    assert _files(tmp_path) == {"manifest.json": b'{"model": "something else"}\n'}


def test_read_manifest_names_a_missing_clip(tmp_path: Path) -> None:
    write_dataset(tmp_path, clips=2, seed=0, config=OLD)
    (tmp_path / "clip_0001.mp4").unlink()
    with pytest.raises(UserError, match=r"1 files its manifest.json lists are missing \(clip_0001"):
        read_manifest(tmp_path)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--clips", "1000000000"], "for the manifest"),  # built 1e9 jobs first: hung
        (["--size", "200000x200000"], "of memory"),  # out of memory, after making the folder
        (["--frames", "2000000000"], "of memory"),
    ],
)
def test_absurd_counts_fail_at_once_in_one_line_and_make_no_folder(
    tmp_path: Path, synth_cli, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out = tmp_path / "new" / "set"
    start = time.perf_counter()
    assert synth_cli(["synth", str(out), "--workers", "1", *args]) == 2
    assert time.perf_counter() - start < 5
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "new").exists()


def test_memory_and_disk_estimates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = ClipConfig(size=(1280, 720), frames=150)
    per_clip = 45 * 1280 * 720 + 5_000 * 150  # 42 MB: tracemalloc measured 41
    monkeypatch.setattr(ds, "available_memory", lambda: 4 * per_clip + 10 * 2_000)
    ds.check_resources(tmp_path, 10, config, workers=4)
    with pytest.raises(UserError, match=r"of memory \(5 rendered at once × 40.\d MiB, and 19"):
        ds.check_resources(tmp_path, 10, config, workers=5)
    monkeypatch.setattr(ds, "available_memory", lambda: None)  # not known: not checked
    free = ds.shutil.disk_usage(tmp_path).free
    frames = 2 * int(free / (50 + 0.001 * 1280 * 720))  # one clip that can't fit, at the least
    with pytest.raises(UserError, match="need at least .* of disk"):
        ds.check_resources(tmp_path, 1, ClipConfig(size=(1280, 720), frames=frames), 1)


def test_an_error_while_rendering_leaves_no_empty_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synth_cli, capsys: pytest.CaptureFixture[str]
) -> None:
    def out_of_memory(job):  # type: ignore[no-untyped-def]
        raise MemoryError("Unable to allocate 112. GiB")

    monkeypatch.setattr(ds, "_make_clip", out_of_memory)
    out = tmp_path / "new" / "set"
    assert synth_cli(["synth", str(out), "--clips", "1", "--size", "64x64", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "out of memory" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_two_workers_write_the_clips_in_order(tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path, clips=3, seed=1, config=OLD, workers=2)
    assert [c["name"] for c in manifest["clip_settings"]] == [f"clip_{k:04d}" for k in range(3)]
    assert read_manifest(tmp_path)["clip_settings"] == manifest["clip_settings"]
    assert not list(tmp_path.glob(".*"))


def test_two_workers_cut_short_are_stopped_and_the_earlier_data_set_kept(tmp_path: Path) -> None:
    write_dataset(tmp_path, clips=2, seed=0, config=OLD)
    before = _files(tmp_path)

    def ctrl_c(clip: dict) -> None:  # in the parent, once the first clip is back
        raise KeyboardInterrupt

    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        write_dataset(tmp_path, clips=6, seed=7, config=NEW, workers=2, progress=ctrl_c)
    assert time.perf_counter() - start < 30
    assert _files(tmp_path) == before


def test_a_kernel_file_system_is_named_as_such(synth_cli, capsys: pytest.CaptureFixture[str]) -> None:
    """``synth /proc/nope`` said "0.0 B is free": true of /proc, not why it cannot be written."""
    import os

    if not os.path.isdir("/proc") or os.statvfs("/proc").f_blocks != 0:
        pytest.skip("no /proc here")
    assert synth_cli(["synth", "/proc/ttball-nope", "--clips", "1", "--size", "64x64"]) == 2
    err = capsys.readouterr().err
    assert "/proc holds no files of its own" in err and err.count("\n") == 1, err

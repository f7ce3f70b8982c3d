"""``track_archive`` on a real local Ray cluster (2 CPUs, loopback, no dashboard).

One cluster for the module; the archive holds three tiny clips and one corrupt file.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

# Ray's raylet, GCS and workers talk to each other over the host's own network address even
# when the node address is 127.0.0.1 (seen with `ss -tn` on 2026-11-30), and tests here may send
# traffic to loopback only. Run them where that is the only address, e.g. inside a network
# namespace with just `lo` up:  ip netns add ttball && ip netns exec ttball ip link set lo up &&
# TTBALL_RAY_TESTS=1 ip netns exec ttball .venv/bin/python -m pytest tests/distributed
if os.environ.get("TTBALL_RAY_TESTS") != "1":
    pytest.skip("Ray tests need TTBALL_RAY_TESTS=1 and a loopback-only network namespace",
                allow_module_level=True)
ray = pytest.importorskip("ray")

from conftest import SMALL, draw_clip

import ttball
from ttball.distributed import track_archive
from ttball.distributed.archive import ArchiveSettings, is_done
from ttball.results import read_track_csv

pytestmark = pytest.mark.ray

CLIPS = {"a.mp4": ("mp4v", 9), "day1/b.mp4": ("mp4v", 7), "day1/late/c.avi": ("MJPG", 6)}
CORRUPT = "day1/broken.mp4"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("archive")
    for rel, (codec, frames) in CLIPS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        draw_clip(root / rel, frames=frames, size=(SMALL[1], SMALL[0]), codec=codec)
    (root / CORRUPT).write_bytes(b"\x00\x00\x00\x18ftypmp42 not really a video")
    (root / "notes.txt").write_text("not a video")
    return root


@pytest.fixture(scope="module")
def first_run(ray_cluster, archive: Path, small_weights: Path, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    report = track_archive(archive, out, weights=small_weights, device="cpu", retries=1,
                           progress=False)
    return out, report


def test_every_clip_is_tracked_like_track(first_run, archive: Path, small_weights: Path) -> None:
    out, report = first_run
    assert sorted(report.tracked) == sorted(CLIPS) and report.skipped == []
    for rel in CLIPS:
        folder = out / Path(rel).with_suffix("")
        expected = ttball.track(archive / rel, weights=small_weights, device="cpu").rows
        got = read_track_csv(folder / "track.csv")
        assert [r.frame for r in got] == [r.frame for r in expected]
        assert [r.visible for r in got] == [r.visible for r in expected]
        for g, e in zip(got, expected):
            assert g.x == pytest.approx(e.x, abs=2e-3) and g.y == pytest.approx(e.y, abs=2e-3)
            assert g.score == pytest.approx(e.score, abs=2e-5)
        meta = json.loads((folder / "track.json").read_text())
        assert meta["summary"]["frames"] == CLIPS[rel][1]
        assert meta["weights"]["name"] == "test-small"
    assert report.frames == sum(f for _, f in CLIPS.values())
    assert not [p for p in out.rglob(".*")]  # no temporary folders left


def test_corrupt_video_is_retried_then_reported(first_run) -> None:
    out, report = first_run
    assert list(report.failed) == [CORRUPT]
    assert report.attempts[CORRUPT] == 2  # 1 + retries
    assert not (out / Path(CORRUPT).with_suffix("")).exists()
    summary = json.loads((out / "archive.json").read_text())
    assert summary["videos"] == 4 and len(summary["tracked"]) == 3
    assert summary["failed"][0]["video"] == CORRUPT and summary["failed"][0]["attempts"] == 2
    assert "VideoError" in summary["failed"][0]["error"]


def test_rerun_skips_finished_videos(first_run, archive: Path, small_weights: Path,
                                     tmp_path: Path) -> None:
    out, _ = first_run
    clean = tmp_path / "archive"
    shutil.copytree(archive, clean, ignore=shutil.ignore_patterns(Path(CORRUPT).name))
    files = sorted(p for p in out.rglob("track.*"))
    before = {p: p.stat().st_mtime_ns for p in files}
    report = track_archive(clean, out, weights=small_weights, device="cpu", progress=False)
    assert report.tracked == [] and report.failed == {}
    assert sorted(report.skipped) == sorted(CLIPS)
    assert {p: p.stat().st_mtime_ns for p in sorted(out.rglob("track.*"))} == before


def test_changed_settings_are_not_reused(first_run) -> None:
    out, report = first_run
    folder = out / Path("a.mp4").with_suffix("")
    assert is_done(folder, report.settings)
    assert not is_done(folder, ArchiveSettings(**{**vars(report.settings), "step": 1}))
    assert not is_done(folder, ArchiveSettings(**{**vars(report.settings),
                                                  "weights_sha256": "other"}))


def test_run_archive_takes_the_cli_namespace(ray_cluster, small_weights: Path, tmp_path: Path,
                                             capsys) -> None:
    import argparse

    from ttball.distributed import run_archive

    draw_clip(_mkdir(tmp_path / "in") / "one.mp4", frames=6, size=(SMALL[1], SMALL[0]))
    args = argparse.Namespace(video=tmp_path / "in", out=tmp_path / "in" / "out", address=None,
                              weights=small_weights, backend="eager-fp32", device="cpu", step=3,
                              batch=2, threshold=None, dedup_ssim=None, csv_format="blurball",
                              quiet=False, overlay=False)
    assert run_archive(args) == 0
    assert (tmp_path / "in" / "out" / "one" / "track.csv").read_text().startswith("Frame,X,Y")
    assert "1 tracked" in capsys.readouterr().out
    assert run_archive(args) == 0  # OUT inside ARCHIVE: its files are never taken for videos
    assert "1 already done" in capsys.readouterr().out


def test_videos_that_would_share_a_result_folder_are_refused(tmp_path: Path) -> None:
    from ttball.errors import UserError

    for name in ("a.mp4", "a.avi"):
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(UserError, match="would both write"):
        track_archive(tmp_path, tmp_path / "out", progress=False)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path

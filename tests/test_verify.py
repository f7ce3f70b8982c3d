"""``ttball verify`` and its library API: a gate that passes identical backends and fails a
broken one with the frames named.

Most tests use :class:`BlobBackend`, a real backend whose "network" puts a Gaussian blob of
logits on the brightest pixel of each frame: on the test clips (a white ball on green) it finds
the ball exactly, cheaply and deterministically, so a shift or a dropped detection is a known
difference. One test runs two registered backends (eager vs folded FP32) on the small network.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from conftest import draw_clip
from torch import Tensor

from ttball.backends import BackendBase, base, create
from ttball.cli import COMMANDS, main
from ttball.errors import UserError, VideoError
from ttball.pipeline import track
from ttball.results import FrameResult, write_track_csv
from ttball.verify import (
    Tolerances,
    VerifyOptions,
    agreement_columns,
    bundled_reference_clips,
    to_markdown,
    verify_backend,
    verify_many,
    write_report,
)

FRAMES = 13  # step 3: four full windows and a trailing one that re-covers frames 10 and 11
SOURCE_PER_HEATMAP_PX = 320 / 128  # draw_clip's 320×180 frames, the small config's 128×72 maps


class BlobBackend(BackendBase):
    """Logits −8 everywhere but a blob (peak +8, σ 1.5 px) on each frame's brightest pixel.

    ``shift`` moves the blob right by that many heatmap pixels; ``drop_right`` leaves out the
    blob of balls in the right half of the frame; ``poison`` puts NaN in every heatmap;
    ``fail`` raises on the call."""

    name = "blob"

    def __init__(
        self, shift: int = 0, drop_right: bool = False, poison: bool = False, fail: bool = False
    ) -> None:
        super().__init__(torch.device("cpu"))
        self.shift, self.drop_right, self.poison, self.fail = shift, drop_right, poison, fail

    def run(self, batch: Tensor) -> Tensor:
        if self.fail:
            raise RuntimeError("kernel exploded")
        b, _, h, w = batch.shape
        bright = batch.reshape(b, 3, 3, h, w).sum(2).reshape(b, 3, -1).argmax(-1)
        v, u = (bright // w)[..., None, None], (bright % w)[..., None, None]
        ys, xs = torch.arange(h).view(1, 1, h, 1), torch.arange(w).view(1, 1, 1, w)
        d2 = (ys - v) ** 2 + (xs - u - self.shift) ** 2
        logits = -8.0 + 16.0 * torch.exp(-d2 / (2 * 1.5**2))
        if self.drop_right:
            logits = torch.where(u > w // 2, torch.full_like(logits, -8.0), logits)
        if self.poison:
            logits[:, :, 0, 0] = float("nan")
        return logits


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture()
def clip(tmp_path: Path) -> Path:
    path = tmp_path / "clip.mp4"
    draw_clip(path, frames=FRAMES)
    return path


@pytest.fixture()
def clip_gt(tmp_path: Path) -> Path:
    """``clip.mp4`` and its ground truth ``clip.csv`` (the drawn centres), side by side."""
    path = tmp_path / "clips" / "clip.mp4"
    path.parent.mkdir()
    centres = draw_clip(path, frames=FRAMES)
    rows = [FrameResult(i, i / 30, True, x, y, 0.0, 0.0, 1.0) for i, (x, y) in enumerate(centres)]
    write_track_csv(path.with_suffix(".csv"), rows)
    return path


def _verify(cand, clip, small_config, **kw):
    options = kw.pop("options", VerifyOptions())
    return verify_backend(
        cand,
        BlobBackend(),
        [clip],
        kw.pop("tol", Tolerances()),
        config=small_config,
        options=options,
        **kw,
    )


def test_identical_backends_pass(clip, small_config) -> None:
    report = _verify(BlobBackend(), clip, small_config)
    assert report.passed, report.reason()
    o = report.overall
    assert o["heatmaps"]["heatmaps"] == FRAMES and o["heatmaps"]["logit_max_abs"] == 0.0
    assert o["heatmaps"]["peak_moved"] == 0
    assert o["detections"]["both_visible"] == FRAMES and o["detections"]["flips"] == 0
    assert o["detections"]["position_diff_px"]["max"] == 0.0
    assert o["track"]["visibility_flips"] == 0 and o["track"]["differing"] == 0
    assert [c.passed for c in report.checks] == [True] * 5


def test_reference_track_is_what_ttball_track_gives(clip, small_model, small_config) -> None:
    report = _verify(BlobBackend(), clip, small_config, options=VerifyOptions(batch=2))
    tracked = track(clip, backend=BlobBackend(), model=small_model, batch=2).rows
    assert report.results[0].ref_rows == tracked
    assert report.results[0].cand_rows == tracked
    assert sum(r.visible for r in tracked) == FRAMES


def test_the_null_diagnostic_fails_the_gate(clip, small_model, small_config) -> None:
    """``null`` (no network, no ball) is a measurement tool; the gate must never pass it."""
    report = _verify(create("null", small_model, "cpu"), clip, small_config)
    assert not report.passed
    assert report.overall["detections"]["flips"] == FRAMES
    assert report.overall["track"]["visibility_flips"] == FRAMES


def test_shifted_candidate_fails_with_frames_named(clip, small_config) -> None:
    report = _verify(BlobBackend(shift=2), clip, small_config)
    assert not report.passed
    assert [c.name for c in report.failed_checks] == ["position difference p99 (px)"]
    expected = 2 * SOURCE_PER_HEATMAP_PX
    pos = report.overall["detections"]["position_diff_px"]
    assert pos["median"] == pytest.approx(expected) and pos["p99"] == pytest.approx(expected)
    assert report.overall["heatmaps"]["peak_moved_with_ball"] == FRAMES
    worst = report.worst
    assert len(worst) == FRAMES and {w["frame"] for w in worst} == set(range(FRAMES))
    assert worst[0]["clip"] == "clip" and worst[0]["kind"] == "position"
    assert worst[0]["distance_px"] == pytest.approx(expected)
    assert "position difference p99" in report.reason()


def test_dropped_detections_are_flips_listed_by_frame(clip, small_config) -> None:
    report = _verify(BlobBackend(drop_right=True), clip, small_config)
    assert not report.passed
    failed = {c.name for c in report.failed_checks}
    assert failed == {"visibility flips (detections)", "visibility flips (track)"}
    flips = [w for w in report.worst if w["kind"] == "flip"]
    frames = [w["frame"] for w in flips]
    assert frames and frames == sorted(frames) and frames[-1] == FRAMES - 1  # the ball ends right
    assert all(w["reference"] is not None and w["candidate"] is None for w in flips)
    assert report.overall["detections"]["flips"] == len(flips)
    assert report.overall["track"]["flip_frames"] == [{"clip": "clip", "frame": f} for f in frames]
    # positions agree where both see the ball
    assert report.overall["detections"]["position_diff_px"]["max"] == 0.0


def test_nan_and_crashing_candidates_fail(clip, small_config) -> None:
    poisoned = _verify(BlobBackend(poison=True), clip, small_config)
    assert [c.name for c in poisoned.failed_checks] == ["non-finite candidate heatmaps"]
    crashed = _verify(BlobBackend(fail=True), clip, small_config)
    assert not crashed.passed and "kernel exploded" in (crashed.error or "")
    assert "failed to run" in crashed.reason()


def test_step1_batches_and_several_candidates(clip, small_config) -> None:
    cands = {"same": BlobBackend(), "shifted": BlobBackend(shift=1)}
    reports = verify_many(
        cands, BlobBackend(), [clip], config=small_config, options=VerifyOptions(step=1, batch=4)
    )
    assert reports["same"].passed and not reports["shifted"].passed
    hm = reports["same"].overall["heatmaps"]["heatmaps"]
    assert hm == 3 * (FRAMES - 2)  # step 1: every window's three heatmaps are used
    rows = reports["shifted"].results[0].cand_rows
    assert [r.frame for r in rows] == list(range(FRAMES))


def test_reports_along_the_way_are_marked_incomplete(tmp_path, clip, small_config) -> None:
    second = tmp_path / "second.mp4"
    draw_clip(second, frames=6)
    seen = []
    final = verify_many(
        {"blob": BlobBackend()},
        BlobBackend(),
        [clip, second],
        config=small_config,
        on_clip=lambda name, reports: seen.append((name, reports["blob"])),
    )["blob"]
    assert [name for name, _ in seen] == ["clip", "second"]
    first = seen[0][1]
    assert not first.complete and not first.passed and "1 of 2 clips" in first.reason()
    assert first.to_json()["complete"] is False and "INCOMPLETE" in to_markdown(first)
    assert final.complete and final.passed and len(final.clips) == 2


def test_ground_truth_accuracy_beside_agreement(clip_gt, small_config) -> None:
    report = _verify(BlobBackend(shift=3), clip_gt, small_config)
    gt = report.ground_truth
    assert gt is not None and gt["clips"] == ["clip"]
    assert (
        gt["reference"]["f1"] == 1.0 and gt["reference"]["position_error_median"] < 2.0
    )  # the blob sits on whole heatmap px
    assert gt["candidate"]["position_error_median"] > 6.0  # 3 heatmap px = 7.5 source px
    assert report.clips[0]["ground_truth"].endswith("clip.csv")


def test_json_and_markdown_reports(tmp_path, clip, small_config) -> None:
    report = _verify(
        BlobBackend(drop_right=True, shift=1), clip, small_config, options=VerifyOptions(images=3)
    )
    written = write_report(report, tmp_path / "out")
    data = json.loads((tmp_path / "out" / "verify.json").read_text())
    assert data["passed"] is False and data["candidate"] == "blob"
    for key in (
        "verdict",
        "settings",
        "tolerances",
        "checks",
        "overall",
        "clips",
        "worst",
        "images",
        "notes",
        "error",
    ):
        assert key in data
    assert data["tolerances"] == {"max_flips": 0, "p99_px": 0.5, "min_compared": 1, "track_px": 0.5}
    clip0 = data["clips"][0]
    assert clip0["frames"] == FRAMES and clip0["width"] == 320
    for key in ("logit_max_abs", "logit_rel", "prob_max_abs", "prob_rel", "peak_moved"):
        assert key in clip0["heatmaps"]
    for key in ("flips", "position_diff_px", "angle_diff_deg", "length_diff_px"):
        assert key in clip0["detections"]
    assert set(clip0["detections"]["position_diff_px"]) == {"median", "p95", "p99", "max"}
    pngs = sorted((tmp_path / "out" / "images").glob("*.png"))
    assert len(pngs) == 3 and len(written) == 5
    assert cv2.imread(str(pngs[0])).shape[1] > 2 * 64  # two panels side by side
    md = (tmp_path / "out" / "verify.md").read_text()
    assert "**FAIL**" in md and "## Worst frames" in md
    flip_frame = next(w["frame"] for w in data["worst"] if w["kind"] == "flip")
    assert f"| clip | {flip_frame} |" in md and "(images/" in md
    assert to_markdown(report) == md


def test_registered_backends_agree_on_the_small_network(clip, small_model) -> None:
    ref = create("eager-fp32", small_model, "cpu")
    cand = create("folded-fp32", small_model, "cpu")
    report = verify_backend(
        cand, ref, [clip], Tolerances(min_compared=0), options=VerifyOptions(batch=2, max_frames=6)
    )
    assert report.settings["weights"] == "test-small"
    hm = report.overall["heatmaps"]
    assert hm["heatmaps"] == 6 and hm["logit_rel"] < 1e-4
    assert report.overall["detections"]["flips"] == 0, report.reason()


def test_agreement_columns(clip, small_config) -> None:
    cols = agreement_columns(BlobBackend(shift=1), BlobBackend(), [clip], config=small_config)
    assert cols["verify_flips"] == 0 and cols["verify_passed"] is False
    assert cols["verify_p99_px"] == pytest.approx(SOURCE_PER_HEATMAP_PX)
    assert cols["verify_peak_moved"] == FRAMES


def test_bad_clips_are_user_errors(tmp_path, small_config) -> None:
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00not a video")
    with pytest.raises(VideoError, match="not a video"):
        _verify(BlobBackend(), broken, small_config)
    folder = tmp_path / "mixed"
    folder.mkdir()
    for i, size in enumerate([(64, 48), (64, 48), (80, 60)]):
        cv2.imwrite(str(folder / f"{i:03d}.png"), np.zeros((size[1], size[0], 3), np.uint8))
    with pytest.raises(VideoError, match="different sizes.*002.png is 80x60"):
        _verify(BlobBackend(), folder, small_config)
    with pytest.raises(UserError, match="max_flips"):
        Tolerances(max_flips=-1)


def test_bundled_clips_are_rendered_once(tmp_path) -> None:
    clips = bundled_reference_clips(count=1, frames=4, cache_dir=tmp_path)
    assert [p.name for p in clips] == ["clip_0000.mp4"]
    assert clips[0].with_suffix(".csv").is_file()
    stamp = clips[0].stat().st_mtime_ns
    assert bundled_reference_clips(count=1, frames=4, cache_dir=tmp_path) == clips
    assert clips[0].stat().st_mtime_ns == stamp
    rows = list(csv.DictReader(clips[0].with_suffix(".csv").open()))
    assert len(rows) == 4


# -- the command line --------------------------------------------------------------------------


def _fake(**kw):
    def factory(model, device, **options):
        return BlobBackend(**kw)

    return factory


@pytest.fixture()
def cli(monkeypatch):
    monkeypatch.setitem(COMMANDS, "verify", ("ttball.cli.verify", "verify a backend"))
    base.names()  # load the real registry first
    for name, kw in {
        "test-blob": {},
        "test-blob-shift": {"shift": 1},
        "test-blob-drop": {"drop_right": True},
    }.items():
        monkeypatch.setitem(
            base._REGISTRY, name, base.BackendSpec(name, _fake(**kw), "fake", base._always)
        )

    def run(*args: object) -> int:
        return main(["verify", *map(str, args), "--quiet"])

    return run


def test_cli_pass_and_fail(tmp_path, cli, clip, small_weights, capsys) -> None:
    common = ("--reference", "test-blob", "--weights", small_weights, "--device", "cpu")
    assert cli(clip, "--backend", "test-blob", *common, "--out", tmp_path / "ok") == 0
    assert "PASS" in capsys.readouterr().out
    assert json.loads((tmp_path / "ok" / "verify.json").read_text())["passed"] is True
    out = tmp_path / "bad"
    assert cli(clip, "--backend", "test-blob-drop", *common, "--out", out, "--images") == 1
    assert "FAIL" in capsys.readouterr().out
    assert (out / "verify.md").is_file() and list((out / "images").glob("*.png"))


def test_cli_several_candidates_write_a_summary(tmp_path, cli, clip, small_weights) -> None:
    out = tmp_path / "many"
    code = cli(
        clip,
        "--backend",
        "test-blob,test-blob-shift,cudagraph-fp16",
        "--reference",
        "test-blob",
        "--weights",
        small_weights,
        "--device",
        "cpu",
        "--out",
        out,
    )
    assert code == 2  # cudagraph-fp16 can't run on CPU: reported, the others still verified
    rows = {r["candidate"]: r for r in json.loads((out / "summary.json").read_text())}
    assert rows["test-blob"]["status"] == "pass" and rows["test-blob-shift"]["status"] == "fail"
    assert rows["cudagraph-fp16"]["status"] == "unavailable"
    assert (out / "test-blob-shift" / "verify.md").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--backend", "no-such-backend"), "unknown backend 'no-such-backend'"),
        (("--backend", "cudagraph-fp16", "--device", "cpu"), "unavailable on cpu"),
        (("--backend", "test-blob", "--batch", "0"), "--batch must be at least 1, got 0"),
    ],
)
def test_cli_bad_options(cli, clip, capsys, args, message) -> None:
    assert cli(clip, *args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--batch", "0"), "--batch must be at least 1, got 0"),
        (("--max-frames", "2"), "--max-frames must be at least 3 (a window), got 2"),
        (("--threshold", "2"), "--threshold must be between 0 and 1, got 2.0"),
        (("--threshold", "0"), "--threshold must be between 0 and 1, got 0.0"),
        (("--threshold", "nan"), "--threshold must be between 0 and 1, got nan"),
        (("--worst", "-1"), "--worst must be 0 or more, got -1"),
        (("--max-flips", "-1"), "--max-flips must be 0 or more, got -1"),
        (("--p99-px", "-1"), "--p99-px must be 0 or more, got -1.0"),
        (("--p99-px", "nan"), "--p99-px must be 0 or more, got nan"),
        (("--min-compared", "-1"), "--min-compared must be 0 or more, got -1"),
    ],
)
def test_cli_errors_name_the_flags(tmp_path, cli, clip, capsys, args, message) -> None:
    """They named the Python API's fields (``max_frames must be at least 3``, ``worst and
    images must be 0 or more``) instead of the options the user typed."""
    out = tmp_path / "v"
    assert cli(clip, "--backend", "test-blob", "--out", out, *args) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"ttball verify: error: {message}"
    assert not out.exists()


def test_cli_gt_must_be_a_folder(tmp_path, cli, clip, capsys) -> None:
    """A --gt that is missing or a file is one line: not a run without the ground truth."""
    a_file = tmp_path / "afile.txt"
    a_file.write_text("not a folder")
    out = tmp_path / "v"
    for gt in (tmp_path / "nonexist", a_file):
        assert cli(clip, "--backend", "test-blob", "--gt", gt, "--out", out) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"ttball verify: error: --gt {gt}: not a folder"
        assert cli("--backend", "test-blob", "--out", out, "--gt", gt, clip) == 2
        assert capsys.readouterr().err.strip() == err
    assert not out.exists()


def test_cli_gt_with_no_clips_csv_is_one_line(tmp_path, cli, clip, capsys) -> None:
    """A --gt folder without any clip's CSV passed with the accuracy section silently left out."""
    gt = tmp_path / "gt"
    gt.mkdir()
    (gt / "other.csv").write_text("frame,time_s,visible,x,y,blur_angle_deg,blur_length_px,score\n")
    out = tmp_path / "v"
    assert cli(clip, "--backend", "test-blob", "--gt", gt, "--out", out) == 2
    name = Path(clip).stem if Path(clip).is_file() else Path(clip).name
    assert capsys.readouterr().err.strip() == (
        f"ttball verify: error: --gt {gt}: holds none of the clips' ground truth ({name}.csv)")
    assert not out.exists()


def test_cli_unreadable_clip(tmp_path, cli, capsys) -> None:
    broken = tmp_path / "x.mp4"
    broken.write_bytes(b"garbage")
    assert cli(broken, "--backend", "test-blob") == 2
    assert "not a video OpenCV can decode" in capsys.readouterr().err
    assert cli(tmp_path / "missing.mp4", "--backend", "test-blob") == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--backend", "test-blob", "--calibrate", "CLIP"), "applies to INT8 candidates only"),
        (("--backend", "onnxrt-int8", "--calibration-method", "entropy"),
         "--calibration-method only applies with --calibrate"),
        (("--backend", "onnxrt-int8", "--calibrate", "MISSING"), "does not exist"),
        (("--backend", "onnxrt-int8", "--calibrate", "GARBAGE"),
         "--calibrate: GARBAGE: not a video OpenCV can decode"),
    ],
)
def test_cli_bad_calibration(tmp_path, cli, clip, capsys, args, message) -> None:
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"not a video")
    names = {"CLIP": clip, "MISSING": tmp_path / "missing.mp4", "GARBAGE": garbage}
    args = tuple(names.get(a, a) for a in args)
    assert cli(clip, *args) == 2
    err = capsys.readouterr().err
    assert message.replace("GARBAGE", str(garbage)) in err and len(err.strip().splitlines()) == 1


def test_cli_int8_candidates_calibrate_on_the_clips_given(tmp_path, cli, clip, small_weights,
                                                         monkeypatch, capsys) -> None:
    """`verify --calibrate` reaches every INT8 candidate (the INT8 file is calibrated on them
    with the method named), so an INT8 made for your cameras can be checked before it is
    switched on; the other candidates ignore it."""
    from ttball.export.onnx import read_metadata

    monkeypatch.setenv("TTBALL_CACHE_DIR", str(tmp_path / "cache"))
    footage = tmp_path / "footage.mp4"
    draw_clip(footage, frames=9)  # three windows
    code = cli(clip, "--backend", "onnxrt-int8,test-blob", "--reference", "eager-fp32",
               "--weights", small_weights, "--device", "cpu", "--out", tmp_path / "v",
               "--calibrate", footage, "--calibration-method", "entropy")
    assert code in (0, 1), capsys.readouterr().err
    (int8,) = (tmp_path / "cache" / "onnx").glob("blurball-int8-*.onnx")
    assert read_metadata(int8)["quantization"].endswith("entropy on 3 windows")
    assert json.loads((tmp_path / "v" / "onnxrt-int8" / "verify.json").read_text())["clips"]


def test_cli_calibrate_before_the_clips_says_it_took_them(cli, clip, capsys,
                                                          monkeypatch) -> None:
    """argparse gives every path after --calibrate to it: the run verifies the bundled clips
    and says why (the clips given are in --calibrate)."""
    def stop(clips, gt):
        raise UserError("stopped before the bundled clips run")

    monkeypatch.setattr("ttball.verify.prepare_clips", stop)
    assert main(["verify", "--backend", "onnxrt-int8", "--calibrate", str(clip), str(clip)]) == 2
    err = capsys.readouterr().err
    assert "no clips given" in err and "name the clips to verify first" in err


@pytest.mark.parametrize("as_type", [str, Path])
def test_one_clip_path_alone_is_one_clip(clip: Path, small_model, as_type) -> None:
    """A str was split into one-letter clips ("/: folder holds no images"), a Path was
    "'PosixPath' object is not iterable"."""
    import copy

    reference = create("eager-fp32", copy.deepcopy(small_model), "cpu")
    candidate = create("eager-fp32", copy.deepcopy(small_model), "cpu")
    report = verify_backend(candidate, reference, as_type(clip), config=small_model.config)
    assert [r.clip.name for r in report.results] == ["clip"]

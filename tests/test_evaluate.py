"""``ttball eval``'s numbers on hand-made tracks, worked out by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ttball.cli import COMMANDS, main
from ttball.errors import UserError
from ttball.evaluate import (
    EvalConfig,
    angle_error_deg,
    average_precision,
    evaluate_paths,
    format_table,
    summarise,
    tally_frames,
)
from ttball.results import FrameResult, write_blurball_csv, write_track_csv


def vis(frame, x, y, angle=0.0, length=0.0, score=1.0):
    return FrameResult(frame, frame / 30, True, x, y, angle, length, score)


def hidden(frame):
    return FrameResult.invisible(frame, frame / 30)


GT = [
    vis(0, 100, 100, angle=89, length=10),
    vis(1, 200, 200, angle=0, length=8),  # exactly min_blur: counts
    vis(2, 300, 300, angle=45, length=20),
    vis(3, 400, 400, angle=10, length=9),
    hidden(4),
    hidden(5),
    vis(6, 50, 50, length=3),
    hidden(7),
    vis(8, 10, 10, length=8),
    vis(9, 20, 20),
]
PRED = [
    vis(0, 103, 104, angle=-89, length=12, score=0.9),  # 5 px: FP1; angle error 2° (wraps)
    vis(1, 200, 203, angle=0, length=8, score=0.8),  # 3 px: TP
    vis(2, 300, 300, angle=50, length=18, score=0.95),  # 0 px: TP
    hidden(3),  # FN
    vis(4, 1, 1, score=0.99),  # FP2
    hidden(5),  # TN
    vis(6, 54, 50, score=0.6),  # exactly 4 px: not below the radius, FP1
    # frame 7 missing: TN; frame 8 missing: FN
    vis(9, 20, 21, score=0.3),  # 1 px: TP
    vis(10, 5, 5, score=0.5),  # not in the ground truth: ignored
]


@pytest.fixture(scope="module")
def metrics():
    return summarise(tally_frames(PRED, GT))


def test_counts(metrics):
    assert {k: metrics[k] for k in ("tp", "tn", "fp1", "fp2", "fp", "fn")} == {
        "tp": 3,
        "tn": 2,
        "fp1": 2,
        "fp2": 1,
        "fp": 3,
        "fn": 2,
    }
    assert (metrics["gt_frames"], metrics["pred_frames"]) == (10, 9)
    assert (metrics["missing_frames"], metrics["extra_frames"]) == (2, 1)


def test_ratios(metrics):
    assert metrics["precision"] == pytest.approx(3 / 6)
    assert metrics["recall"] == pytest.approx(3 / 5)  # FP1 is not in the denominator (WASB)
    assert metrics["f1"] == pytest.approx(2 * 0.5 * 0.6 / 1.1)
    assert metrics["accuracy"] == pytest.approx(5 / 10)


def test_rmse_and_position_errors(metrics):
    # Both visible: frames 0, 1, 2, 6, 9 at 5, 3, 0, 4, 1 px.
    assert metrics["rmse"] == pytest.approx(math.sqrt((25 + 9 + 0 + 16 + 1) / 5))
    assert metrics["rmse_tp"] == pytest.approx(math.sqrt((9 + 0 + 1) / 3))
    assert metrics["both_visible"] == 5
    assert metrics["position_error_median"] == pytest.approx(3.0)
    assert metrics["position_error_p95"] == pytest.approx(4.8)  # 4 + 0.8·(5 − 4), linear


def test_average_precision(metrics):
    # Ranked: 0.99 FP2, 0.95 TP, 0.9 FP1, 0.8 TP, 0.6 FP1, 0.3 TP → precisions 1/2, 2/4, 3/6
    # at the hits; recall denominator TP + FN = 5.
    assert metrics["ap"] == pytest.approx((1 / 2 + 2 / 4 + 3 / 6) / 5)


def test_blur_errors(metrics):
    # GT blur ≥ 8 px and both visible: frames 0 (2°, 2 px), 1 (0°, 0 px), 2 (5°, 2 px).
    assert metrics["blur_frames"] == 3
    assert metrics["angle_error_deg_mean"] == pytest.approx(7 / 3)
    assert metrics["angle_error_deg_median"] == pytest.approx(2.0)
    assert metrics["length_error_px_mean"] == pytest.approx(4 / 3)
    assert metrics["length_error_px_median"] == pytest.approx(2.0)


def test_radius_and_min_blur_are_configurable():
    m = summarise(tally_frames(PRED, GT, EvalConfig(radius=5.5, min_blur=15)))
    assert (m["tp"], m["fp1"]) == (5, 0)
    assert m["blur_frames"] == 1 and m["angle_error_deg_mean"] == pytest.approx(5.0)


@pytest.mark.parametrize(
    "a, b, expected",
    [(89, -89, 2), (-89, 89, 2), (0, 90, 90), (90, -90, 0), (10, 190, 0), (30, -30, 60)],
)
def test_angle_error_wraps_at_180(a, b, expected):
    assert angle_error_deg(a, b) == pytest.approx(expected)


def _wasb_ap(scores, hits, positives):
    """The published evaluator's AP: best precision per recall level, summed over recall steps."""
    r2p = {}
    tp = 0
    for i, k in enumerate(np.argsort(-np.asarray(scores), kind="stable"), start=1):
        tp += hits[k]
        r, p = tp / positives, tp / i
        r2p[r] = max(r2p.get(r, p), p)
    ap, prev = 0.0, 0.0
    for r, p in r2p.items():
        ap += (r - prev) * p
        prev = r
    return ap


def test_average_precision_matches_the_published_definition():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        scores = rng.choice([0.2, 0.5, 0.7, 0.9], n).tolist()  # with ties
        hits = (rng.random(n) < 0.6).tolist()
        positives = sum(hits) + int(rng.integers(0, 5))
        if positives == 0:
            continue
        assert average_precision(scores, hits, positives) == pytest.approx(
            _wasb_ap(scores, hits, positives)
        )
    assert average_precision([], [], 0) is None


def test_nothing_visible_gives_none_not_nan():
    m = summarise(tally_frames([hidden(0)], [hidden(0)]))
    assert (m["tn"], m["accuracy"], m["rmse"], m["ap"], m["angle_error_deg_mean"]) == (
        1,
        1.0,
        None,
        None,
        None,
    )
    json.dumps(m, allow_nan=False)


def test_duplicate_frames_are_refused():
    with pytest.raises(UserError, match="frame 0 twice"):
        tally_frames([hidden(0), hidden(0)], [hidden(0)])


def test_folders_pair_by_name(tmp_path):
    gt_dir, pred_dir = tmp_path / "gt", tmp_path / "pred"
    (pred_dir / "clip_0000").mkdir(parents=True)
    gt_dir.mkdir()
    for name in ("clip_0000", "clip_0001", "clip_0002"):
        write_track_csv(gt_dir / f"{name}.csv", GT)
    write_track_csv(pred_dir / "clip_0000" / "track.csv", PRED)  # the tracker's layout
    write_blurball_csv(pred_dir / "clip_0001.csv", PRED)  # a flat file, the published columns
    report = evaluate_paths(pred_dir, gt_dir)
    by_name = {c["name"]: c for c in report["clips"]}
    assert by_name["clip_0000"]["tp"] == by_name["clip_0001"]["tp"] == 3
    assert by_name["clip_0002"]["pred"] is None and by_name["clip_0002"]["fn"] == 7
    assert report["total"]["tp"] == 6 and report["total"]["gt_frames"] == 30
    table = format_table(report)
    assert "clip_0002: no prediction file" in table and "frame count mismatch" in table


def test_folder_without_any_match_is_an_error(tmp_path):
    (tmp_path / "gt").mkdir()
    (tmp_path / "pred").mkdir()
    write_track_csv(tmp_path / "gt" / "a.csv", GT)
    with pytest.raises(UserError, match="no prediction"):
        evaluate_paths(tmp_path / "pred", tmp_path / "gt")


@pytest.fixture
def eval_cli(monkeypatch, tmp_path):
    monkeypatch.setitem(COMMANDS, "eval", ("ttball.cli.eval", "evaluate"))
    write_track_csv(tmp_path / "pred.csv", PRED)
    write_track_csv(tmp_path / "gt.csv", GT)
    return main


def test_cli_table_and_json(eval_cli, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert (
        eval_cli(["eval", str(tmp_path / "pred.csv"), str(tmp_path / "gt.csv"), "--json", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "total" in printed and "0.5000" in printed
    saved = json.loads(out.read_text())
    assert saved["total"]["fp2"] == 1 and saved["radius_px"] == 4.0
    assert (
        eval_cli(
            [
                "eval",
                str(tmp_path / "pred.csv"),
                str(tmp_path / "gt.csv"),
                "--format",
                "json",
                "--radius",
                "5.5",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["total"]["tp"] == 5


def test_cli_bad_input(eval_cli, tmp_path, capsys):
    assert eval_cli(["eval", str(tmp_path / "nope.csv"), str(tmp_path / "gt.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert (
        eval_cli(["eval", str(tmp_path / "pred.csv"), str(tmp_path / "gt.csv"), "--radius", "0"])
        == 2
    )
    assert "--radius" in capsys.readouterr().err


@pytest.mark.parametrize("columns, row, message", [
    ("frame,time_s,visible,x,y,blur_angle_deg,blur_length_px,score", "0,0,1,nan,5,0,0,1",
     "a visible ball needs a number for x"),
    ("frame,time_s,visible,x,y,blur_angle_deg,blur_length_px,score", "0,0,1,4,,0,0,1",
     "a visible ball needs a number for y"),
    ("frame,time_s,visible,x,y,blur_angle_deg,blur_length_px,score", "0,0,7,4,5,0,0,1",
     "visibility must be 0 or 1, got '7'"),
    ("Frame,X,Y,Visibility,L,Theta", "0,nan,5,1,0,0", "a visible ball needs a number for X"),
    ("Frame,X,Y,Visibility,L,Theta", "0,4,5,2,0,0", "visibility must be 0 or 1, got '2'"),
])
def test_a_visible_ball_without_a_position_or_an_odd_visibility_is_refused(
        tmp_path, columns, row, message):
    """A visible row with NaN x/y became a ball at (0, 0); visibility 7 an invisible frame."""
    from ttball.results import read_track_csv as read_results

    path = tmp_path / "gt.csv"
    path.write_text(f"{columns}\n{row}\n")
    with pytest.raises(UserError, match=message):
        read_results(path)


def test_an_invisible_frame_may_leave_its_cells_empty(tmp_path):
    from ttball.results import read_track_csv as read_results

    path = tmp_path / "gt.csv"
    path.write_text("frame,time_s,visible,x,y,blur_angle_deg,blur_length_px,score\n"
                    "0,0,0,nan,,,,\n1,0,false,0,0,0,0,0\n")
    assert [r.visible for r in read_results(path)] == [False, False]


def test_a_ground_truth_with_no_frames_is_refused(tmp_path):
    """A header alone evaluated to a report of "total 0" and every metric None."""
    from ttball.evaluate import evaluate_paths

    header = "frame,time_s,visible,x,y,blur_angle_deg,blur_length_px,score\n"
    (tmp_path / "gt.csv").write_text(header)
    (tmp_path / "pred.csv").write_text(header + "0,0,1,4,5,0,0,1\n")
    with pytest.raises(UserError, match="gt.csv: a ground truth with no frames"):
        evaluate_paths(tmp_path / "pred.csv", tmp_path / "gt.csv")

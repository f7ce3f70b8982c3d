"""The synthetic clips' ground truth agrees with their pixels; clips are reproducible."""

from __future__ import annotations

import csv
import json
import math

import cv2
import numpy as np
import pytest

from ttball.cli import COMMANDS, main
from ttball.errors import UserError
from ttball.results import TRACK_COLUMNS, read_track_csv
from ttball.synth import ClipConfig, clip_seed, generate_clip, plan_clip, write_dataset
from ttball.synth.physics import FLOOR_Z, TABLE_HALF_LENGTH, TABLE_HALF_WIDTH, simulate_rally
from ttball.synth.render import falloff_weights, render_streak

BACKGROUND = 40  # the plain setting's flat grey
BALL = 235  # its white ball


def _ball_pixels(frame: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columns, rows and coverage (0..1) of the pixels that differ from the plain background."""
    cover = (frame[..., 1].astype(np.float64) - BACKGROUND) / (BALL - BACKGROUND)
    ys, xs = np.nonzero(cover > 0)  # no noise in the plain setting: any change is the ball
    return xs, ys, cover[ys, xs]


def _measured(frames, rows):
    """(row, centroid x, centroid y, principal angle, half extent) of each visible frame whose
    streak lies wholly inside the frame."""
    out = []
    for frame, row in zip(frames, rows):
        if not row.visible:
            continue
        xs, ys, w = _ball_pixels(frame)
        h, wd = frame.shape[:2]
        if (
            len(xs) == 0
            or xs.min() == 0
            or ys.min() == 0
            or xs.max() == wd - 1
            or ys.max() == h - 1
        ):
            continue
        cx, cy = (w * xs).sum() / w.sum(), (w * ys).sum() / w.sum()
        dx, dy = xs - cx, ys - cy
        mu20, mu02, mu11 = (w * dx * dx).sum(), (w * dy * dy).sum(), (w * dx * dy).sum()
        angle = math.degrees(0.5 * math.atan2(2 * mu11, mu20 - mu02))
        u = np.array([math.cos(math.radians(angle)), math.sin(math.radians(angle))])
        proj = dx * u[0] + dy * u[1]
        out.append((row, cx, cy, angle, (proj.max() - proj.min() + 1) / 2))
    return out


def _angle_diff(a: float, b: float) -> float:
    d = abs(a - b) % 180
    return min(d, 180 - d)


@pytest.fixture(scope="module")
def plain_measurements():
    """Frames of plain clips, except those whose exposure spans a stroke: there the path folds
    back on itself and the coverage centroid leaves the middle of the streak's extent."""
    found = []
    config = ClipConfig(size=(640, 360), fps=25.0, frames=40, plain=True)
    for seed in range(4):
        plan = plan_clip(seed, config)
        half = plan.settings["shutter"] / config.fps / 2
        hits = np.array([h.t for h in plan.trajectory.hits])
        keep = [not np.any(np.abs(hits - r.time_s) < half) for r in plan.rows]
        frames = [f for f, k in zip(plan.frames(), keep) if k]
        found += _measured(frames, [r for r, k in zip(plan.rows, keep) if k])
    return found


def test_position_matches_pixels(plain_measurements):
    assert len(plain_measurements) > 50
    errors = [math.hypot(cx - r.x, cy - r.y) for r, cx, cy, _, _ in plain_measurements]
    assert max(errors) < 1.0, f"blur centre off by {max(errors):.2f} px"


def test_blur_angle_and_length_match_pixels_for_fast_ball(plain_measurements):
    fast = [m for m in plain_measurements if m[0].blur_length_px >= 10]
    assert len(fast) >= 10
    for row, _, _, angle, half_extent in fast:
        assert _angle_diff(angle, row.blur_angle_deg) < 2.0
        # The rendered streak's outermost pixels lie within a pixel of the true extent.
        assert half_extent == pytest.approx(row.blur_length_px, abs=1.0)


def test_streak_coverage_integrates_to_disc_area():
    """A disc moving along a polyline covers π r² pixels·exposure in total, at any speed."""
    r = 2.5
    path = np.array([[20.0, 30.0], [45.0, 38.0], [80.0, 36.0]])
    sprite = render_streak(path, np.full(3, r), falloff_weights(2, 0.0), shading=0.0)
    assert sprite is not None
    assert sprite.alpha.sum() == pytest.approx(math.pi * r * r, rel=0.01)
    assert sprite.alpha.max() <= 1.0 + 1e-6


def test_ground_truth_conventions():
    _, rows = generate_clip(3, ClipConfig(size=(640, 360), frames=60))
    assert [r.frame for r in rows] == list(range(60))
    assert any(r.visible for r in rows)
    for r in rows:
        if r.visible:
            assert -0.5 <= r.x < 639.5 and -0.5 <= r.y < 359.5
            assert -90.0 < r.blur_angle_deg <= 90.0
            assert r.blur_length_px >= 1.0 and r.score == 1.0
        else:
            assert (r.x, r.y, r.blur_angle_deg, r.blur_length_px, r.score) == (0, 0, 0, 0, 0)


def test_occluded_ball_is_drawn_but_labelled_invisible():
    """Some frames hide the ball behind a player or the table: drawn (partly), not visible."""
    hidden = 0
    for seed in range(6):
        plan = plan_clip(seed, ClipConfig(size=(640, 360), frames=80))
        for sprite, row in zip(plan.sprites, plan.rows):
            if sprite is not None and not row.visible:
                x, y = sprite.x0 + sprite.alpha.shape[1] / 2, sprite.y0 + sprite.alpha.shape[0] / 2
                hidden += 0 <= x < 640 and 0 <= y < 360
    assert hidden > 0


def test_same_seed_same_clip_different_seed_different_clip():
    config = ClipConfig(size=(320, 180), frames=6)
    frames_a, rows_a = generate_clip(11, config)
    frames_b, rows_b = generate_clip(11, config)
    assert rows_a == rows_b
    for a, b in zip(frames_a, frames_b):
        np.testing.assert_array_equal(a, b)
    _, rows_c = generate_clip(12, config)
    assert rows_c != rows_a


def test_frames_are_bgr_uint8_of_the_requested_size():
    frames, rows = generate_clip(5, ClipConfig(size=(320, 180), fps=60.0, frames=4))
    frames = list(frames)
    assert len(frames) == len(rows) == 4
    assert all(f.shape == (180, 320, 3) and f.dtype == np.uint8 for f in frames)
    assert rows[1].time_s == pytest.approx(1 / 60)


def test_rally_physics_is_continuous_and_stays_in_the_hall():
    rng = np.random.default_rng(0)
    for _ in range(40):
        traj = simulate_rally(rng, -3.0, 6.0)
        assert np.all(np.diff(traj.arc_t0) >= 0)
        t = np.linspace(-3.0, 6.0, 9001)
        pos = traj.position(t)
        # While in play the ball stays above the floor and never jumps: under 40 m/s between
        # millisecond samples.
        assert pos[traj.is_present(t), 2].min() >= FLOOR_Z - 1e-6
        both = traj.is_present(t[1:]) & traj.is_present(t[:-1])
        speed = np.linalg.norm(np.diff(pos, axis=0), axis=1) / np.diff(t)
        assert speed[both].max() < 40.0
        sides = [h.side for h in traj.hits]
        for a, b in zip(traj.hits, traj.hits[1:]):
            assert b.t > a.t
        # Within a rally the two players take turns (a serve may follow a miss from either side).
        assert all(s in (-1, 1) for s in sides)
        # Table bounces land on the table.
        bounce = np.flatnonzero((traj.arc_p0[:, 2] == 0.0) & (traj.arc_v0[:, 2] > 0))
        for k in bounce:
            x, y = traj.arc_p0[k, :2]
            assert abs(x) <= TABLE_HALF_LENGTH + 1e-9 and abs(y) <= TABLE_HALF_WIDTH + 1e-9


def test_write_dataset_csv_video_and_manifest(tmp_path):
    config = ClipConfig(size=(320, 180), fps=30.0, frames=5)
    manifest = write_dataset(tmp_path, clips=2, seed=4, config=config, workers=1)
    for k in range(2):
        with open(tmp_path / f"clip_{k:04d}.csv", newline="") as f:
            assert tuple(next(csv.reader(f))) == TRACK_COLUMNS
        rows = read_track_csv(tmp_path / f"clip_{k:04d}.csv")
        _, expected = generate_clip(clip_seed(4, k), config)
        assert [r.visible for r in rows] == [r.visible for r in expected]
        assert [r.x for r in rows] == pytest.approx([r.x for r in expected], abs=1e-3)
        cap = cv2.VideoCapture(str(tmp_path / f"clip_{k:04d}.mp4"))
        n = 0
        while True:
            ok, frame = cap.read()
            if not ok:
                break
            assert frame.shape == (180, 320, 3)
            n += 1
        cap.release()
        assert n == 5
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk["seed"] == 4 and len(on_disk["clip_settings"]) == 2
    assert (
        on_disk["clip_settings"][1]["seed"]
        == clip_seed(4, 1)
        == manifest["clip_settings"][1]["seed"]
    )
    assert not list(tmp_path.glob(".*"))  # no partial files left behind


@pytest.fixture
def synth_cli(monkeypatch):
    monkeypatch.setitem(COMMANDS, "synth", ("ttball.cli.synth", "synthetic clips"))
    return main


def test_cli_writes_clips(synth_cli, tmp_path, capsys):
    rc = synth_cli(
        [
            "synth",
            str(tmp_path / "out"),
            "--clips",
            "1",
            "--frames",
            "3",
            "--size",
            "320x180",
            "--fps",
            "30",
            "--workers",
            "1",
            "--seed",
            "2",
        ]
    )
    assert rc == 0
    assert (tmp_path / "out" / "clip_0000.mp4").is_file() and (
        tmp_path / "out" / "manifest.json"
    ).is_file()
    assert "wrote 1 clips" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--size", "12x"], "--size"),
        (["--size", "63x64"], "even"),
        (["--clips", "0"], "--clips"),
        (["--frames", "2"], "--frames"),
        (["--fps", "0"], "--fps"),
    ],
)
def test_cli_rejects_bad_options(synth_cli, tmp_path, capsys, args, message):
    assert synth_cli(["synth", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("config, message", [
    (ClipConfig(fps=0, frames=2), "fps must be between 1 and 1000"),   # was a random fps
    (ClipConfig(fps=-30, frames=2), "fps must be between 1 and 1000"),  # negative times
    (ClipConfig(fps=float("nan"), frames=2), "fps"),                   # a ValueError inside
    (ClipConfig(fps=float("inf"), frames=2), "fps"),                   # every time 0
    (ClipConfig(size=(0, 0), frames=2), "even integers of at least 64"),  # ZeroDivisionError
    (ClipConfig(size=(-128, 72), frames=2), "even integers of at least 64"),
])
def test_a_clip_configuration_that_cannot_render_is_refused(config, message) -> None:
    with pytest.raises(UserError, match=message):
        plan_clip(0, config)

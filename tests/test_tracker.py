import pytest

from ttball.postprocess import Detection
from ttball.stream import StreamOptions
from ttball.tracker import OnlineTracker


def test_best_score_wins_without_history() -> None:
    t = OnlineTracker()
    ball = t.update([Detection(10, 10, 1.0), Detection(500, 500, 3.0)])
    assert (ball.x, ball.y) == (500, 500)


def test_far_candidates_dropped_after_a_detection() -> None:
    t = OnlineTracker(max_jump_px=300)
    t.update([Detection(100, 100, 1.0)])
    ball = t.update([Detection(500, 500, 9.0), Detection(300, 250, 1.0)])
    assert (ball.x, ball.y) == (300, 250)  # 250 px away: kept; the other is 566 px away


def test_everything_far_means_no_ball_then_recovery() -> None:
    t = OnlineTracker(max_jump_px=300)
    t.update([Detection(100, 100, 1.0)])
    assert t.update([Detection(900, 600, 5.0)]) is None
    # The previous frame had no ball, so the gate is open again.
    assert t.update([Detection(900, 600, 5.0)]).x == 900


def test_empty_frame() -> None:
    t = OnlineTracker()
    assert t.update([]) is None


@pytest.mark.parametrize("bad", [0.0, -5.0, float("nan")])
def test_max_jump_must_be_positive(bad: float) -> None:
    """At 0, below it or NaN every later candidate was dropped: the ball lost after frame one."""
    with pytest.raises(ValueError, match="max_jump_px must be positive"):
        OnlineTracker(max_jump_px=bad)
    with pytest.raises(ValueError, match="max_jump_px must be positive"):
        StreamOptions(max_jump_px=bad)


def test_unbounded_jump_keeps_every_candidate() -> None:
    t = OnlineTracker(max_jump_px=float("inf"))
    t.update([Detection(0, 0, 0.9)])
    assert t.update([Detection(5000, 5000, 0.8)]) == Detection(5000, 5000, 0.8)

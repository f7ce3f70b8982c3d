"""scripts/lane_queue_model.py: the lanes' queue model behind call17.sh's prediction."""

from __future__ import annotations

import random

import pytest

from tests.bench.script_env import load_script

model = load_script("lane_queue_model")

LOAD = model.Load(seconds=5.0)


def test_busy_share_is_the_frames_work_and_a_window_stays_at_least_its_push() -> None:
    out = model.simulate(LOAD, model.Lane(delay_ms=0.0, sigma=0.0))
    # 11 sessions x 60 frames/s x 2.3 ms over 2 lanes (the last push may end past the run)
    assert out["busy_pct"] == pytest.approx(11 * 60 * 2.3 / 2 / 10, abs=0.5)
    assert out["stay_mean"] >= 2.3 and out["stay_p99"] >= out["stay_p95"] >= 2.3
    assert out["frames_a_push"] >= 1.0


def test_waiting_for_company_makes_pushes_larger_and_windows_stay_longer() -> None:
    runs = [model.simulate(LOAD, model.Lane(delay_ms=d, sigma=0.25)) for d in (0.0, 1.0, 2.0)]
    assert [r["frames_a_push"] for r in runs] == sorted(r["frames_a_push"] for r in runs)
    assert runs[0]["stay_mean"] < runs[1]["stay_mean"] < runs[2]["stay_mean"]
    # with no fixed cost a push, the lanes' work does not depend on how frames are grouped
    assert runs[0]["busy_pct"] == pytest.approx(runs[2]["busy_pct"], abs=3.0)


def test_a_fixed_cost_a_push_is_paid_more_often_without_the_wait() -> None:
    without = model.simulate(LOAD, model.Lane(delay_ms=0.0, per_frame_ms=1.8, fixed_ms=1.0))
    waiting = model.simulate(LOAD, model.Lane(delay_ms=2.0, per_frame_ms=1.8, fixed_ms=1.0))
    assert without["busy_pct"] > waiting["busy_pct"]


def test_the_command_line_prints_one_line_a_delay(capsys: pytest.CaptureFixture[str]) -> None:
    assert model.main(["--delay-ms", "2", "0", "--sigma", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["delay 2.0 ms", "delay 0.0 ms"]


def test_a_flush_after_every_push_occupies_the_lane_and_delays_the_rows() -> None:
    plain = model.simulate(LOAD, model.Lane(delay_ms=0.0))
    flushed = model.simulate(LOAD, model.Lane(delay_ms=0.0, flush_ms=1.0))
    assert plain["idle_pct"] == 0.0
    # one flush a push: 1 ms each, on lanes of the same load
    pushes_a_lane_s = 11 * 60 / flushed["frames_a_push"] / 2
    assert flushed["idle_pct"] == pytest.approx(pushes_a_lane_s * 1.0 / 10, rel=0.05)
    assert flushed["frames_a_push"] > plain["frames_a_push"]  # frames queue meanwhile
    assert flushed["stay_mean"] > plain["stay_mean"] + 1.0


def test_flushing_only_an_empty_lane_flushes_less_and_a_bad_rule_is_refused() -> None:
    short = model.simulate(LOAD, model.Lane(flush_ms=1.5, sigma=0.25))
    empty = model.simulate(LOAD, model.Lane(flush_ms=1.5, sigma=0.25, flush_when="empty"))
    assert empty["idle_pct"] < short["idle_pct"]
    with pytest.raises(ValueError, match="flush_when"):
        model.simulate(LOAD, model.Lane(flush_ms=1.0, flush_when="never"))


def test_a_flush_thread_leaves_the_lane_free_and_the_rows_a_flush_later() -> None:
    plain = model.simulate(LOAD, model.Lane(delay_ms=0.0))
    apart = model.simulate(LOAD, model.Lane(delay_ms=0.0, flush_ms=1.0, flush_when="thread"))
    # the lane pushes as without a flush; each window's row leaves a flush (1 ms, shorter than
    # any push: never queued behind another) after its push
    assert apart["frames_a_push"] == plain["frames_a_push"]
    assert apart["busy_pct"] == plain["busy_pct"] and apart["idle_pct"] > 0
    assert apart["stay_mean"] == pytest.approx(plain["stay_mean"] + 1.0, abs=0.051)


def test_even_phases_start_the_sessions_as_the_load_test_does() -> None:
    """``phases="even"``: this replica's sessions are every ``replicas``-th of ``total``,
    their starts spread over ``step`` frame intervals (``ttball loadtest``'s start_offset),
    a window every ``step``-th frame from the first; the jitter is the only draw."""
    load = model.Load(sessions=3, seconds=0.1, jitter_ms=0.0, phases="even", total=12,
                      replicas=4)
    frames = model.arrivals(load, random.Random(1))
    period = 1000.0 / 60
    firsts = {}
    for t, session, window in frames:
        firsts.setdefault(session, t)
    # sessions 0, 4 and 8 of 12: starts 0, 1/3 and 2/3 of three intervals
    assert [firsts[s] for s in range(3)] == pytest.approx([0.0, period, 2 * period])
    own = [window for t, session, window in frames if session == 0]
    assert own[:6] == [False, False, True, False, False, True]
    with pytest.raises(ValueError, match="phases"):
        model.arrivals(model.Load(phases="odd"), random.Random(1))


def test_even_phases_wait_for_company_less_than_random_ones() -> None:
    """Evenly spread arrivals (the load test's) leave a free lane's oldest frame alone less
    often than random ones, so fewer pushes wait out the delay, and with the spread as the
    only draw the seeds' mean is one seed's figure."""
    lane = model.Lane(delay_ms=2.0, per_frame_ms=1.02, fixed_ms=2.95, sigma=0.0, flush_ms=0.93)
    even = model.simulate(model.Load(seconds=5.0, phases="even"), lane)
    drawn = model.simulate(model.Load(seconds=5.0), lane)
    assert even["waited_pct"] < drawn["waited_pct"]
    assert model.averaged(model.Load(seconds=2.0, phases="even", jitter_ms=0.0), lane, 3) == \
        model.simulate(model.Load(seconds=2.0, phases="even", jitter_ms=0.0), lane)


def test_a_frames_client_latency_adds_the_wait_for_its_windows_last_frame() -> None:
    """``client_*``: each window's stay plus 0, 1 and 2 frame intervals (step 3: the wait of
    its first and second frames for the third), as the load test's client times a frame less
    the transport; with one fixed push time the stay is one value, so the quantiles are it
    plus those intervals."""
    lane = model.Lane(delay_ms=0.0, per_frame_ms=1.0, fixed_ms=0.0, sigma=0.0)
    load = model.Load(sessions=1, lanes=1, seconds=2.0, jitter_ms=0.0, phases="even")
    out = model.simulate(load, lane)
    assert out["stay_p99"] == pytest.approx(1.0)
    assert out["client_p50"] == pytest.approx(1.0 + 1000 / 60, abs=0.1)
    assert out["client_p99"] == pytest.approx(1.0 + 2000 / 60, abs=0.1)


def test_the_arrival_decoder_takes_its_batches_one_after_another() -> None:
    """``--arrival-*`` (serve --decode-on-arrival): a batch holds every frame arrived by its
    start; the next starts when it ends."""
    lane = model.Lane(arrival_fixed_ms=1.0, arrival_per_frame_ms=0.5)
    frames = [(0.0, 0, True), (0.5, 1, True), (1.0, 2, True), (9.0, 0, False)]
    # [0] 0 -> 1.5; [1, 2] (arrived by 1.5) 1.5 -> 3.5; [3] 9 -> 10.5
    assert model.decoded_at(frames, lane) == {0: 1.5, 1: 3.5, 2: 3.5, 3: 10.5}
    assert not model.Lane().arrival and lane.arrival


def test_a_slow_arrival_decoder_holds_the_pushes_back() -> None:
    """A push ends no earlier than its last frame's decode: a fast arrival decoder changes
    little; one whose batches take longer than the frames' wait for their push makes the
    pushes larger and the windows stay longer (the fifty-seventh session's measurement)."""
    base = {"delay_ms": 2.0, "per_frame_ms": 0.99, "fixed_ms": 2.6, "sigma": 0.3,
            "flush_ms": 0.93}
    plain = model.simulate(LOAD, model.Lane(**base))
    fast = model.simulate(LOAD, model.Lane(**base, arrival_fixed_ms=0.5,
                                           arrival_per_frame_ms=0.1, after_ready_ms=1.5))
    slow = model.simulate(LOAD, model.Lane(**base, arrival_fixed_ms=3.0,
                                           arrival_per_frame_ms=1.0, after_ready_ms=1.5))
    assert fast["stay_mean"] == pytest.approx(plain["stay_mean"], abs=0.5)
    assert slow["frames_a_push"] > plain["frames_a_push"] + 1.0
    assert slow["stay_mean"] > plain["stay_mean"] + 5 and slow["client_p99"] > plain["client_p99"]

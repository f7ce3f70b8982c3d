"""scripts/gpu_jpeg_procs.py: decoding spread over processes, run here with the host decoder."""

from __future__ import annotations

import multiprocessing as mp

import cv2
import numpy as np
import pytest

from tests.bench.script_env import ROOT, load_script

procs = load_script("gpu_jpeg_procs")


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """Spawned children import the script by name: from scripts/, on the path they inherit."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))


def blobs(count: int = 4) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [cv2.imencode(".jpg", rng.integers(0, 255, (36, 64, 3), dtype=np.uint8))[1].tobytes()
            for _ in range(count)]


def test_rows_add_up_the_processes_frames():
    row = procs.run_row(mp.get_context("spawn"), "cpu", blobs(), 2, procs.Load("cv2", 4, 0.3))
    assert row["procs"] == 2 and "error" not in row
    assert len(row["per_proc_frames_per_s"]) == 2
    assert row["frames_per_s"] > 0 and row["calls"] >= 2
    # the aggregate is all frames over the longest process's time: at most the sum of the rates
    assert row["frames_per_s"] <= sum(row["per_proc_frames_per_s"]) * 1.0001
    assert 0 < row["call_ms_median"] <= row["call_ms_p99"]


def test_a_decoder_that_cannot_run_is_an_error_row():
    row = procs.run_row(mp.get_context("spawn"), "cpu", blobs(), 1, procs.Load("nvjpeg", 4, 0.1))
    assert row["procs"] == 1
    assert "nvjpeg unavailable" in row["error"]


def test_the_rows_p99_is_the_load_tests_percentile():
    assert procs.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert procs.percentile([1.0, 2.0], 99) == 2.0


def test_a_process_that_dies_unreported_is_an_error_row_not_a_hang(monkeypatch):
    monkeypatch.setattr(procs, "decode_worker", procs.batch_sizes)  # wrong arguments: dies at once
    row = procs.run_row(mp.get_context("fork"), "cpu", blobs(), 1, procs.Load("cv2", 4, 0.1))
    assert row == {"procs": 1, "error": "a process exited with code 1"}


def test_varied_batches_cycle_from_a_third_to_all():
    assert procs.batch_sizes(32, vary=False) == [32]
    sizes = procs.batch_sizes(30, vary=True)
    assert min(sizes) == 10 and max(sizes) == 30 and len(set(sizes)) == 5


def test_a_varied_row_counts_the_frames_it_decoded():
    row = procs.run_row(mp.get_context("spawn"), "cpu", blobs(), 1,
                         procs.Load("cv2", 6, 0.3, vary=True))
    assert row["vary"] is True and row["calls"] >= 5
    # batches of 2, 6, 3, 5, 4 in turn
    assert 2 * row["calls"] < row["frames"] < 6 * row["calls"]


def test_a_row_names_the_work_ahead_and_the_decode_priority():
    row = procs.run_row(mp.get_context("spawn"), "cpu", blobs(), 1,
                         procs.Load("cv2", 4, 0.1, ahead_kind="sleep", priority=-1))
    assert "error" not in row
    assert (row["ahead_kind"], row["priority"]) == ("sleep", -1)


def test_an_unknown_kind_of_work_ahead_is_refused():
    with pytest.raises(ValueError, match="unknown ahead kind 'spin'"):
        procs._Ahead(None, 20.0, "spin")


def test_the_cli_refuses_an_unknown_kind_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["gpu_jpeg_procs.py", "--out", "x.json", "--video", "v.mp4",
                                     "--ahead-kind", "mm,spin"])
    with pytest.raises(SystemExit, match="--ahead-kind: 'spin' is not one of mm, small, sleep"):
        procs.main()


def test_a_row_through_decode_processes_has_their_split():
    row = procs.run_row(mp.get_context("spawn"), "cpu", blobs(), 1,
                         procs.Load("cv2", 4, 0.3, children=2))
    assert "error" not in row and row["decode_processes"] == 2
    assert set(row["split_ms"]) == {"child", "fill", "transfer", "to_child", "from_child",
                                    "copy_out"}
    assert all(v > 0 for v in row["split_ms"].values())
    assert row["split_ms"]["child"] < row["call_ms_p99"]
    plain = procs.run_row(mp.get_context("spawn"), "cpu", blobs(), 1, procs.Load("cv2", 4, 0.1))
    assert plain["decode_processes"] == 0 and plain["split_ms"] is None


def test_windows_a_second_count_the_calls_that_ended_in_the_span():
    ends = [[1.0, 1.5, 2.0, 3.5], [1.2, 2.5]]
    assert procs.windows_per_s(ends, 4, (1.0, 3.0)) == 4 * 4 / 2.0  # 1.5, 2.0, 1.2, 2.5


def test_busy_networks_run_beside_a_decode_row_and_say_what_each_got():
    ctx = mp.get_context("spawn")
    networks = procs.BusyNetworks(ctx, procs.Network("eager-fp32", 2, "cpu", "72x128"), 2)
    networks.start(timeout_s=120)
    try:
        row = procs.run_row(ctx, "cpu", blobs(), 1, procs.Load("cv2", 4, 1.5))
    finally:
        ends = networks.stop()
    assert "error" not in row and len(ends) == 2
    t0, t1 = row["span"]
    assert t1 - t0 >= 1.5
    assert all(one == sorted(one) and one for one in ends)
    # Whether a call ends inside the span is the host's business: on a loaded 2-core CI host
    # these calls took 2-7 s each and none ended in 1.5 s. What the row says is what it counted.
    inside = sum(t0 < t <= t1 for one in ends for t in one)
    assert procs.windows_per_s(ends, 2, row["span"]) == inside * 2 / (t1 - t0)


def test_a_network_that_cannot_start_says_why():
    networks = procs.BusyNetworks(mp.get_context("spawn"),
                                  procs.Network("no-such-backend", 2, "cpu", "72x128"), 2)
    with pytest.raises(RuntimeError, match="--busy-network: .*no-such-backend"):
        networks.start(timeout_s=60)
    assert not any(w.is_alive() for w in networks.workers)

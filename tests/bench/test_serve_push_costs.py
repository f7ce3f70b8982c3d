"""scripts/serve_push_costs.py: per-run host milliseconds a frame by push stage, from the
cumulative /metrics snapshots of a load test, on hand-made snapshots."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.script_env import load_script

ROOT = Path(__file__).resolve().parents[2]
push_costs = load_script("serve_push_costs")


def _snapshot(frames: int, windows: int, calls: int, decode: float, total: float) -> str:
    return "\n".join([
        "# HELP ttball_frames_total frames", f"ttball_frames_total {frames}.0",
        f"ttball_windows_total {windows}.0", f"ttball_batch_size_count {calls}.0",
        f"ttball_batch_size_sum {windows}.0",
        f'ttball_push_seconds_sum{{stage="decode"}} {decode}',
        f'ttball_push_seconds_sum{{stage="total"}} {total}',
        'ttball_push_seconds_bucket{stage="total",le="0.005"} 3.0', ""])


def _quantiles_table(folder: Path) -> list[str]:
    """``serve_push_costs.py --quantiles folder``'s lines."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           "--quantiles", str(folder)], capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.splitlines()


def test_runs_are_differences_of_the_cumulative_snapshots(tmp_path: Path) -> None:
    (tmp_path / "metrics-4.txt").write_text(_snapshot(1000, 300, 100, 0.2, 0.5))
    (tmp_path / "metrics-16.txt").write_text(_snapshot(5000, 1500, 200, 1.0, 2.5))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=60, check=True)
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    # run 4: 1000 frames, 3 windows a call, decode 0.2 ms a frame, total 0.5;
    # run 16 (sorted by count, not by name): 4000 frames, 1200/100 = 12, 0.8 s / 4000, 2.0 s / 4000
    assert rows[0][:4] == ["4", "1000", "3.000", "0.200"] and rows[0][-1] == "0.500"
    assert rows[1][:4] == ["16", "4000", "12.000", "0.200"] and rows[1][-1] == "0.500"


def test_loads_run_in_any_order_are_taken_in_the_order_they_ran(tmp_path: Path) -> None:
    """A load test may run its loads from the most sessions down (call30.sh's second start):
    each snapshot is then less the one taken before it, found by the frames it counts (a
    counter only grows), not the one of the next smaller session count."""
    (tmp_path / "metrics-6-0.txt").write_text(_snapshot(0, 40, 10, 0.1, 0.3))
    (tmp_path / "metrics-6-80.txt").write_text(_snapshot(4000, 1240, 110, 0.9, 2.3))  # first
    (tmp_path / "metrics-6-64.txt").write_text(_snapshot(5000, 1540, 210, 1.3, 3.3))  # last
    loads = [(sessions, delta["frames_total"]) for _, sessions, _, delta
             in push_costs.snapshot_deltas(tmp_path, push_costs.read_metrics)]
    assert loads == [(80, 4000.0), (64, 1000.0)]
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=60, check=True)
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    # 80: 4000 frames, 1200 windows in 100 calls, 0.8 s of decode; 64: 1000, 300 in 100, 0.4 s
    assert rows[0][:5] == ["6", "80", "4000", "12.000", "0.200"]
    assert rows[1][:5] == ["6", "64", "1000", "3.000", "0.400"]


@pytest.mark.parametrize("view", [[], ["--pairs"], ["--replicas"]])
def test_a_folder_without_snapshots_is_one_line(tmp_path: Path, view: list[str]) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           *view, str(tmp_path)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and "no metrics-N.txt snapshots" in done.stderr


def test_ray_snapshots_sum_their_replicas_and_restart_with_each_server(tmp_path: Path) -> None:
    def two_replicas(frames: int, windows: int, calls: int, total: float) -> str:
        lines = []
        for name in ("a", "b"):  # each replica half of everything
            lines += [f'ttball_frames_total{{replica="{name}"}} {frames / 2}',
                      f'ttball_windows_total{{replica="{name}"}} {windows / 2}',
                      f'ttball_batch_size_count{{replica="{name}"}} {calls / 2}',
                      f'ttball_push_seconds_sum{{replica="{name}",stage="total"}} {total / 2}']
        return "\n".join(lines) + "\n"

    (tmp_path / "metrics-1-32.txt").write_text(_snapshot(2000, 600, 300, 0.4, 1.0))
    (tmp_path / "metrics-4-64.txt").write_text(two_replicas(4000, 1200, 400, 2.0))
    (tmp_path / "metrics-4-128.txt").write_text(two_replicas(12000, 3600, 600, 5.0))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=60, check=True)
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    # the 4-replica server's first run is counted from zero, not from the 1-replica server's
    assert rows[0][:5] == ["1", "32", "2000", "2.000", "0.200"] and rows[0][-1] == "0.500"
    assert rows[1][:4] == ["4", "64", "4000", "3.000"] and rows[1][-1] == "0.500"
    # 128 sessions: 8000 frames, 2400 windows in 200 calls, 3.0 s of pushes
    assert rows[2][:4] == ["4", "128", "8000", "12.000"] and rows[2][-1] == "0.375"


def test_a_snapshot_at_zero_sessions_is_the_warm_ups_baseline(tmp_path: Path) -> None:
    (tmp_path / "metrics-0.txt").write_text(_snapshot(0, 40, 10, 0.1, 0.3))  # warm-up pushes
    (tmp_path / "metrics-8.txt").write_text(_snapshot(1000, 340, 110, 0.3, 0.8))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=60, check=True)
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    # one row: 1000 frames, 300 windows in 100 calls, 0.2 s of decode and 0.5 s in all
    assert len(rows) == 1 and rows[0][:4] == ["8", "1000", "3.000", "0.200"]
    assert rows[0][-1] == "0.500"


def test_quantiles_interpolate_within_a_bucket_as_histogram_quantile_does() -> None:
    buckets = {0.001: 10.0, 0.002: 50.0, 0.005: 90.0, 0.01: 100.0, float("inf"): 100.0,
               "sum": 0.3, "count": 100.0}
    # p50: rank 50 is the 0.002 bucket's top; p70: halfway through 0.002-0.005 (50 → 90)
    assert math.isclose(push_costs.quantile(0.5, buckets), 0.002)
    assert math.isclose(push_costs.quantile(0.7, buckets), 0.0035)
    assert math.isclose(push_costs.quantile(0.05, buckets), 0.0005)  # from 0 to the first edge
    assert math.isclose(push_costs.quantile(0.99, buckets), 0.0095)
    # all in +Inf: the last finite edge; empty: NaN
    assert push_costs.quantile(0.5, {0.01: 0.0, float("inf"): 4.0}) == 0.01
    assert math.isnan(push_costs.quantile(0.5, {0.01: 0.0, float("inf"): 0.0}))


def test_stage_quantiles_are_per_run_and_summed_over_replicas(tmp_path: Path) -> None:
    def snapshot(fast: float, slow: float) -> str:
        """Two replicas' queue waits: ``fast`` waits under 1 ms and ``slow`` in 5-10 ms each."""
        lines = []
        for name in ("a", "b"):
            for le, n in (("0.001", fast), ("0.005", fast), ("0.01", fast + slow),
                          ("+Inf", fast + slow)):
                lines.append(f'ttball_stage_seconds_bucket{{le="{le}",replica="{name}",'
                             f'stage="queue"}} {n}')
            lines += [f'ttball_stage_seconds_count{{replica="{name}",stage="queue"}} {fast + slow}',
                      (f'ttball_stage_seconds_sum{{replica="{name}",stage="queue"}} '
                       f'{0.0005 * fast + 0.0075 * slow}')]
        return "\n".join(lines) + "\n"

    (tmp_path / "metrics-4-0.txt").write_text(snapshot(5, 0))  # the warm-up, left out
    (tmp_path / "metrics-4-40.txt").write_text(snapshot(55, 50))  # this run: 50 fast, 50 slow
    (tmp_path / "metrics-4-56.txt").write_text(snapshot(55, 150))  # then 100 slow only
    rows = push_costs.stage_quantiles(tmp_path)
    assert [(r["replicas"], r["sessions"]) for r in rows] == [(4, 40), (4, 56)]
    first, second = rows
    assert first["queue_n"] == 200 and math.isclose(first["queue_mean"], 4.0)
    assert math.isclose(first["queue_p50"], 1.0) and math.isclose(first["queue_p99"], 9.9)
    assert second["queue_n"] == 200 and math.isclose(second["queue_p50"], 7.5)
    assert math.isnan(second["push_mean"])  # no push histogram in these snapshots
    assert "4.0/1.0/" in _quantiles_table(tmp_path)[2]


def test_stage_quantiles_include_the_event_loops_lag(tmp_path: Path) -> None:
    """``ttball_event_loop_lag_seconds`` (no stage label) is a column of its own."""
    def snapshot(low: float, high: float) -> str:  # lags under 0.25 ms, and in 10-20 ms
        lines = [f'ttball_event_loop_lag_seconds_bucket{{le="{le}",replica="a"}} {n}'
                 for le, n in (("0.00025", low), ("0.01", low), ("0.02", low + high),
                               ("+Inf", low + high))]
        lines += [f'ttball_event_loop_lag_seconds_count{{replica="a"}} {low + high}',
                  f'ttball_event_loop_lag_seconds_sum{{replica="a"}} {0.0001 * low + 0.015 * high}']
        return "\n".join(lines) + "\n"

    (tmp_path / "metrics-4-0.txt").write_text(snapshot(100, 0))
    (tmp_path / "metrics-4-64.txt").write_text(snapshot(190, 10))  # this run: 90 low, 10 high
    (row,) = push_costs.stage_quantiles(tmp_path)
    assert row["loop_lag_n"] == 100 and math.isclose(row["loop_lag_mean"], 1.59)
    assert math.isclose(row["loop_lag_p50"], 0.25 * 50 / 90) and 10 < row["loop_lag_p99"] < 20


def test_the_decode_process_split_is_shown_only_where_a_run_has_it(tmp_path: Path) -> None:
    """serve --decode-process adds decode_child / decode_fill / decode_transfer push stages:
    columns of --quantiles when some run observed them, absent otherwise."""
    def snapshot(stages: tuple[str, ...]) -> str:
        lines = []
        for stage in stages:
            lines += [f'ttball_push_seconds_bucket{{le="0.01",replica="a",stage="{stage}"}} 10',
                      f'ttball_push_seconds_bucket{{le="+Inf",replica="a",stage="{stage}"}} 10',
                      f'ttball_push_seconds_count{{replica="a",stage="{stage}"}} 10',
                      f'ttball_push_seconds_sum{{replica="a",stage="{stage}"}} 0.05']
        return "\n".join(lines) + "\n"

    def header(folder: Path) -> str:
        return _quantiles_table(folder)[1]

    plain, split = tmp_path / "plain", tmp_path / "split"
    plain.mkdir()
    split.mkdir()
    (plain / "metrics-4-40.txt").write_text(snapshot(("total", "decode")))
    (split / "metrics-4-40.txt").write_text(
        snapshot(("total", "decode", "decode_child", "decode_fill", "decode_transfer")))
    assert "decode_child" not in header(plain) and "loop_lag" in header(plain)
    assert header(split).split()[-3:] == ["decode_child", "decode_fill", "decode_transfer"]
    (row,) = push_costs.stage_quantiles(split)
    assert row["decode_child_n"] == 10 and math.isclose(row["decode_child_mean"], 5.0)
    newer = tmp_path / "newer"  # the transfer's own split, since the thirtieth session
    newer.mkdir()
    (newer / "metrics-4-40.txt").write_text(snapshot(("total", "decode") + push_costs.DECODE_PROCESS))
    assert header(newer).split()[-6:] == list(push_costs.DECODE_PROCESS)


def test_the_arrival_decoders_batches_are_a_column_where_a_run_has_them(tmp_path: Path) -> None:
    """serve --decode-on-arrival exports ``ttball_arrival_batch_seconds`` (no stage label):
    an ``arrival_batch`` column of --quantiles, absent without it."""
    def snapshot(batches: int) -> str:
        lines = ['ttball_push_seconds_count{replica="a",stage="total"} 10',
                 'ttball_push_seconds_sum{replica="a",stage="total"} 0.05']
        if batches:
            lines += ['ttball_arrival_batch_seconds_bucket{le="0.002",replica="a"} 0',
                      f'ttball_arrival_batch_seconds_bucket{{le="0.004",replica="a"}} {batches}',
                      f'ttball_arrival_batch_seconds_bucket{{le="+Inf",replica="a"}} {batches}',
                      f'ttball_arrival_batch_seconds_count{{replica="a"}} {batches}',
                      f'ttball_arrival_batch_seconds_sum{{replica="a"}} {0.003 * batches}']
        return "\n".join(lines) + "\n"

    plain, arriving = tmp_path / "plain", tmp_path / "arriving"
    for folder, batches in ((plain, 0), (arriving, 20)):
        folder.mkdir()
        (folder / "metrics-6-64.txt").write_text(snapshot(batches))
    assert "arrival_batch" not in _quantiles_table(plain)[1]
    assert _quantiles_table(arriving)[1].split()[-1] == "arrival_batch"
    (row,) = push_costs.stage_quantiles(arriving)
    assert row["arrival_batch_n"] == 20 and math.isclose(row["arrival_batch_mean"], 3.0)
    assert 2 < row["arrival_batch_p50"] <= 4


def test_frames_a_push_and_the_lanes_busy_share(tmp_path: Path) -> None:
    """``fr/push`` from ``ttball_push_frames``; ``busy %``: push seconds over lanes × the load's
    active seconds (``ready-R.json``, ``loadtest-R-S.json``), NaN where those files are missing."""
    def snapshot(pushes: float, frames: float, seconds: float) -> str:
        lines = []
        for name in ("a", "b"):  # two replicas, each half
            lines += [f'ttball_push_frames_count{{replica="{name}"}} {pushes / 2}',
                      f'ttball_push_frames_sum{{replica="{name}"}} {frames / 2}',
                      f'ttball_push_seconds_count{{replica="{name}",stage="total"}} {pushes / 2}',
                      f'ttball_push_seconds_sum{{replica="{name}",stage="total"}} {seconds / 2}']
        return "\n".join(lines) + "\n"

    (tmp_path / "metrics-2-0.txt").write_text(snapshot(10, 30, 1.0))  # the warm-up
    (tmp_path / "metrics-2-64.txt").write_text(snapshot(110, 4030, 25.0))  # 100 pushes, 24 s
    (tmp_path / "metrics-2-96.txt").write_text(snapshot(160, 6030, 40.0))
    (tmp_path / "ready-2.json").write_text(json.dumps(
        {"device_pipeline": {"lanes": 2}, "replicas": [{"replica": "a"}, {"replica": "b"}]}))
    (tmp_path / "loadtest-2-64.json").write_text(json.dumps({"active_s": 10.0}))
    first, second = push_costs.stage_quantiles(tmp_path)
    assert math.isclose(first["frames_a_push"], 40.0)  # 4000 frames in 100 pushes
    assert math.isclose(first["lanes_busy"], 24.0 / (2 * 2 * 10.0))  # four lanes for 10 s
    assert math.isclose(second["frames_a_push"], 40.0)
    assert math.isnan(second["lanes_busy"])  # no loadtest-2-96.json
    (tmp_path / "loadtest-2-96.json").write_text("")  # an empty report: not a number either
    assert math.isnan(push_costs.stage_quantiles(tmp_path)[1]["lanes_busy"])
    assert _quantiles_table(tmp_path)[2].split()[:4] == ["2", "64", "40.0", "60"]


def test_the_children_busy_share(tmp_path: Path) -> None:
    """``kids %``: a lane's slowest child's decode and fill seconds over lanes × the load's
    active seconds; shown only with the decode children's stages; NaN without them."""
    def snapshot(scale: float, stages: tuple[str, ...]) -> str:
        lines = []
        for stage, seconds in zip(("total", "decode", *stages), (30.0, 12.0, 9.0, 3.0)):
            lines += [f'ttball_push_seconds_count{{replica="a",stage="{stage}"}} {100 * scale}',
                      f'ttball_push_seconds_sum{{replica="a",stage="{stage}"}} {seconds * scale}']
        return "\n".join(lines) + "\n"

    kids, plain = tmp_path / "kids", tmp_path / "plain"
    for folder, stages in ((kids, ("decode_child", "decode_fill")), (plain, ())):
        folder.mkdir()
        (folder / "metrics-2-0.txt").write_text(snapshot(0.1, stages))
        (folder / "metrics-2-64.txt").write_text(snapshot(1.1, stages))
        (folder / "ready-2.json").write_text(json.dumps({"device_pipeline": {"lanes": 1},
                                                         "replicas": [{}, {}]}))
        (folder / "loadtest-2-64.json").write_text(json.dumps({"active_s": 10.0}))
    (row,) = push_costs.stage_quantiles(kids)
    assert math.isclose(row["children_busy"], (9.0 + 3.0) / (2 * 10.0))  # two lanes, 10 s
    assert math.isclose(row["lanes_busy"], 30.0 / 20.0)
    head, cells = _quantiles_table(kids)[1:3]
    assert head.split()[:6] == ["replicas", "sessions", "fr/push", "busy", "%", "kids"]
    assert cells.split()[4] == "60"
    (row,) = push_costs.stage_quantiles(plain)
    assert math.isnan(row["children_busy"])
    assert "kids" not in _quantiles_table(plain)[1]


def test_the_gpu_stages_and_the_network_busy_share(tmp_path: Path) -> None:
    """``gpu_*`` push stages (a backend call's time on its stream): columns only where a run
    has them, after the decode children's; ``net %``: ``gpu_network`` over lanes × the load's
    active seconds."""
    def snapshot(scale: float, stages: dict[str, float]) -> str:
        lines = []
        for stage, seconds in {"total": 30.0, "decode": 12.0, **stages}.items():
            lines += [f'ttball_push_seconds_count{{replica="a",stage="{stage}"}} {100 * scale}',
                      f'ttball_push_seconds_sum{{replica="a",stage="{stage}"}} {seconds * scale}']
        return "\n".join(lines) + "\n"

    gpu, plain = tmp_path / "gpu", tmp_path / "plain"
    stages = {"decode_child": 9.0, "gpu_between": 4.0, "gpu_normalize": 1.0, "gpu_network": 15.0,
              "gpu_stats": 2.0}
    for folder, these in ((gpu, stages), (plain, {})):
        folder.mkdir()
        (folder / "metrics-2-0.txt").write_text(snapshot(0.1, these))
        (folder / "metrics-2-64.txt").write_text(snapshot(1.1, these))
        (folder / "ready-2.json").write_text(json.dumps({"device_pipeline": {"lanes": 1},
                                                         "replicas": [{}, {}]}))
        (folder / "loadtest-2-64.json").write_text(json.dumps({"active_s": 10.0}))
    (row,) = push_costs.stage_quantiles(gpu)
    assert math.isclose(row["network_busy"], 15.0 / (2 * 10.0))
    assert math.isclose(row["gpu_network_mean"], 150.0)  # ms a push: 15 s over 100 pushes
    head, cells = _quantiles_table(gpu)[1:3]
    assert head.split()[-5:] == ["decode_child", *push_costs.GPU]
    assert head.split()[5:8] == ["kids", "%", "net"]
    assert cells.split()[4:6] == ["45", "75"]
    (row,) = push_costs.stage_quantiles(plain)
    assert math.isnan(row["network_busy"])
    head = _quantiles_table(plain)[1]
    assert "net %" not in head and "gpu_network" not in head


def test_the_gpu_columns_are_the_pipelines_stages() -> None:
    """The report's gpu_* columns are the stage names GpuPipeline times, parts included."""
    from ttball.kernels.prepost import GPU_STAGES, GPU_STEPS

    assert push_costs.GPU == GPU_STAGES and push_costs.GPU_STEPS == GPU_STEPS
    assert set(GPU_STEPS) <= set(push_costs.OPTIONAL)


def test_cpu_shares_and_allocator_events_are_shown_where_a_run_has_them(tmp_path: Path) -> None:
    def snapshot(frames: int, total: float, cpu: float, decode_cpu: float, mallocs: int) -> str:
        return _snapshot(frames, 3 * frames // 10, frames // 10, total / 2, total) + "\n".join([
            f'ttball_push_cpu_seconds_total{{stage="total"}} {cpu}',
            f'ttball_push_cpu_seconds_total{{stage="decode"}} {decode_cpu}',
            f'ttball_push_seconds_sum{{stage="post_wait"}} {total / 4}',
            f'ttball_push_cpu_seconds_total{{stage="post_wait"}} {cpu / 4}',
            f'ttball_cuda_allocator_events{{event="num_device_alloc"}} {mallocs}',
            'ttball_cuda_allocator_events{event="num_device_free"} 0.0', ""])

    (tmp_path / "metrics-8.txt").write_text(snapshot(1000, 0.5, 0.2, 0.05, 40))
    (tmp_path / "metrics-16.txt").write_text(snapshot(5000, 2.5, 0.6, 0.45, 46))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=60, check=True)
    lines = done.stdout.splitlines()
    head = lines[1].split()
    rows = [dict(zip(head, line.split())) for line in lines[2:]]
    # run 16: 2.0 s of pushes, 0.4 s on the CPU; decode 1.0 s, 0.4 on the CPU; 6 cudaMallocs
    assert rows[1]["total_cpu_pct"] == "20" and rows[1]["decode_cpu_pct"] == "40"
    assert rows[1]["num_device_alloc"] == "6" and rows[1]["num_device_free"] == "0"
    assert rows[0]["total_cpu_pct"] == "40" and rows[0]["num_device_alloc"] == "40"
    # a postprocess part's share from its own wall time (read since the thirty-seventh session)
    assert rows[1]["post_wait_cpu_pct"] == "20" and rows[0]["post_wait_cpu_pct"] == "40"
    assert "preprocess_cpu_pct" not in head and "num_alloc_retries" not in head


def test_padding_and_carried_windows_are_shown_where_a_run_has_them(tmp_path: Path) -> None:
    """ttball_batch_padding_total and ttball_windows_carried_total (serve --carry-windows) in %
    of the windows run, each run's difference; a run without them has no such columns."""
    def counted(frames: int, windows: int, calls: int, padding: int, carried: int) -> str:
        return (_snapshot(frames, windows, calls, 0.1, 0.2)
                + f"ttball_batch_padding_total {padding}.0\n"
                + f"ttball_windows_carried_total {carried}.0\n")

    (tmp_path / "metrics-8-0.txt").write_text(counted(300, 100, 10, 30, 0))
    (tmp_path / "metrics-8-320.txt").write_text(counted(3300, 1100, 80, 50, 150))
    rows = push_costs.runs(tmp_path)
    assert len(rows) == 1
    # 1000 windows in 70 calls, 20 padding rows (2 %), 150 carried (15 %)
    assert rows[0]["padded_pct"] == 2.0 and rows[0]["carried_pct"] == 15.0
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=60, check=True)
    head, cells = (line.split() for line in done.stdout.splitlines()[1:3])
    assert head[:6] == ["replicas", "sessions", "frames", "windows_a_call", "padded_pct",
                        "carried_pct"]
    assert cells[3:6] == ["14.286", "2.0", "15.0"]
    (tmp_path / "metrics-8-0.txt").write_text(_snapshot(300, 100, 10, 0.1, 0.2))
    (tmp_path / "metrics-8-320.txt").write_text(_snapshot(3300, 1100, 80, 0.2, 0.4))
    assert "padded_pct" not in push_costs.runs(tmp_path)[0]


def test_the_lanes_idle_work_and_the_batches_that_waited_for_company(tmp_path: Path) -> None:
    """The batcher's ``gather``, ``idle``, ``batch`` and ``thread`` stages: columns only where a run has them;
    ``idle %``: idle seconds over lanes × the load's active seconds; ``wait %``: the gathers
    above the first bucket (0.5 ms) over all gathers."""
    def snapshot(scale: float, lane: bool) -> str:
        lines = [f'ttball_push_seconds_count{{replica="a",stage="total"}} {100 * scale}',
                 f'ttball_push_seconds_sum{{replica="a",stage="total"}} {10.0 * scale}']
        if lane:
            for stage, count, seconds in (("gather", 80.0, 0.04), ("idle", 90.0, 5.0),
                                          ("batch", 100.0, 9.0), ("thread", 100.0, 8.0)):
                labels = f'replica="a",stage="{stage}"'
                lines += [f"ttball_stage_seconds_count{{{labels}}} {count * scale}",
                          f"ttball_stage_seconds_sum{{{labels}}} {seconds * scale}",
                          f'ttball_stage_seconds_bucket{{{labels},le="0.0005"}} {count / 4 * scale}']
        return "\n".join(lines) + "\n"

    with_lane, plain = tmp_path / "lane", tmp_path / "plain"
    for folder, lane in ((with_lane, True), (plain, False)):
        folder.mkdir()
        (folder / "metrics-2-0.txt").write_text(snapshot(0.1, lane))
        (folder / "metrics-2-64.txt").write_text(snapshot(1.1, lane))
        (folder / "ready-2.json").write_text(json.dumps({"device_pipeline": {"lanes": 1},
                                                         "replicas": [{}, {}]}))
        (folder / "loadtest-2-64.json").write_text(json.dumps({"active_s": 10.0}))
    (row,) = push_costs.stage_quantiles(with_lane)
    assert math.isclose(row["lanes_busy"], 10.0 / 20.0)  # two lanes for 10 s
    assert math.isclose(row["lanes_idle"], 5.0 / 20.0)
    assert math.isclose(row["waited"], 0.75)  # a quarter of the gathers under 0.5 ms
    assert math.isclose(row["idle_mean"], 1e3 * 5.0 / 90.0)
    head, cells = _quantiles_table(with_lane)[1:3]
    assert head.split()[4:10] == ["%", "idle", "%", "wait", "%", "stay"]
    assert cells.split()[3:6] == ["50", "25", "75"]
    assert head.split()[-4:] == list(push_costs.LANE)
    (row,) = push_costs.stage_quantiles(plain)
    assert math.isnan(row["lanes_idle"]) and math.isnan(row["waited"])
    assert "idle" not in _quantiles_table(plain)[1]


def test_the_flushes_stages_are_columns_where_a_run_has_them(tmp_path: Path) -> None:
    """``ttball_flush_seconds_total{stage}``: ``flush_<stage>_ms`` columns, ms a frame of the
    run, only where the snapshots have them."""
    def snapshot(frames: int, track: float, wait: float) -> str:
        return _snapshot(frames, frames // 3, 10, 0.1, 0.4) + "\n".join([
            f'ttball_flush_seconds_total{{stage="track"}} {track}',
            f'ttball_flush_seconds_total{{stage="wait"}} {wait}', ""])

    (tmp_path / "metrics-4.txt").write_text(snapshot(1000, 0.3, 1.0))
    (tmp_path / "metrics-8.txt").write_text(snapshot(3000, 0.7, 3.0))
    rows = push_costs.runs(tmp_path)
    assert rows[0]["flush_track_ms"] == pytest.approx(0.3) and rows[0]["flush_wait_ms"] == 1.0
    assert rows[1]["flush_track_ms"] == pytest.approx(0.2)  # 0.4 s over 2000 frames
    assert "flush_post_read_ms" not in rows[0]
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=60, check=True)
    head = done.stdout.splitlines()[1].split()
    assert head[-2:] == ["flush_wait_ms", "flush_track_ms"]
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "metrics-4.txt").write_text(_snapshot(1000, 300, 100, 0.2, 0.5))
    assert not any(k.startswith("flush_") for k in push_costs.runs(plain)[0])


def _flush_snapshot(scale: float, push_s: float, flush: dict[str, float],
                    extra: tuple[str, ...] = ()) -> str:
    """A cumulative snapshot of ``scale`` × (3000 frames, 1000 pushes of ``push_s`` seconds in
    all, ``flush``'s ttball_flush_seconds by stage, 1000 idle / batch / thread observations of
    0.9 / 5.5 / 5.2 s in all), with the ``extra`` lines."""
    lines = [f"ttball_frames_total {3000 * scale}", *extra,
             f'ttball_push_seconds_count{{stage="total"}} {1000 * scale}',
             f'ttball_push_seconds_sum{{stage="total"}} {push_s * scale}',
             *(f'ttball_flush_seconds_total{{stage="{stage}"}} {seconds * scale}'
               for stage, seconds in flush.items())]
    for stage, seconds in (("idle", 0.9), ("batch", 5.5), ("thread", 5.2)):
        lines += [f'ttball_stage_seconds_count{{stage="{stage}"}} {1000 * scale}',
                  f'ttball_stage_seconds_sum{{stage="{stage}"}} {seconds * scale}']
    return "\n".join(lines) + "\n"


def test_flushes_are_split_into_ms_a_flush_beside_the_push_and_the_batch(tmp_path: Path) -> None:
    """``--flushes``: a flush's parts in ms a flush (the counters' seconds over the idle
    calls), the hand-offs (the loop's idle mean less the call on the thread) and a batch's
    time beyond its push, per run (differences of the cumulative snapshots)."""
    def snapshot(scale: float) -> str:
        return _flush_snapshot(scale, 5.0, {"post_wait": 0.4, "call": 0.7, "call_cpu": 0.5})

    (tmp_path / "metrics-6-0.txt").write_text(snapshot(0.25))  # the warm-up's: left out
    (tmp_path / "metrics-6-64.txt").write_text(snapshot(1.25))
    (row,) = push_costs.flush_costs(tmp_path)
    assert row["flushes"] == 1000 and row["idle_ms"] == pytest.approx(0.9)
    assert row["post_wait_ms"] == pytest.approx(0.4) and row["call_ms"] == pytest.approx(0.7)
    assert row["call_cpu_ms"] == pytest.approx(0.5) and row["handoff_ms"] == pytest.approx(0.2)
    assert row["push_ms"] == pytest.approx(5.0) and row["batch_less_push_ms"] == pytest.approx(0.5)
    assert row["thread_ms"] == pytest.approx(5.2) and row["batch_handoff_ms"] == pytest.approx(0.3)
    assert math.isnan(row["track_ms"])  # not in the snapshots
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           "--flushes", str(tmp_path)], capture_output=True, text=True,
                          timeout=60, check=True)
    head, cells = (line.split() for line in done.stdout.splitlines()[1:3])
    assert "track" not in head and head[:4] == ["replicas", "sessions", "flushes", "idle"]
    assert dict(zip(head, cells))["handoff"] == "0.200"


def test_loads_put_each_loads_state_and_live_settings_on_a_row(tmp_path: Path) -> None:
    """``--loads``: a load a row, from the snapshots' differences and the files beside them:
    the client's p99, the live settings (one value when the replicas agree), frames a push and
    each flush's GPU work; a load without a ``live-R-S.json`` ran with none."""
    def snapshot(scale: float) -> str:
        return _flush_snapshot(scale, 6.0, {"gpu_network": 1.2, "call": 0.7},
                               (f"ttball_push_frames_count {1000 * scale}",
                                f"ttball_push_frames_sum {2600 * scale}"))

    for sessions, scale in ((0, 0.5), (63, 1.5), (64, 2.5), (65, 3.5)):
        (tmp_path / f"metrics-6-{sessions}.txt").write_text(snapshot(scale))
    for sessions, p99 in ((63, 50.5), (64, 57.0), (65, 51.0)):
        (tmp_path / f"loadtest-6-{sessions}.json").write_text(
            json.dumps({"latency_ms": {"p99": p99}, "active_s": 8.0}))
    on = {"flush_after_push": True}
    (tmp_path / "live-6-64.json").write_text(json.dumps({"replicas": {"a": on, "b": on}}))
    (tmp_path / "live-6-65.json").write_text(json.dumps({"replicas": {"a": on, "b": {}}}))
    first, second, third = push_costs.load_states(tmp_path)
    assert (first["sessions"], first["p99"], first["live"]) == (63, 50.5, None)
    assert third["live"] == "differ"  # the replicas disagree
    assert second["live"] == on and second["p99"] == 57.0
    assert second["frames_a_push"] == pytest.approx(2.6)
    assert second["gpu_network_ms"] == pytest.approx(1.2) and second["push_ms"] == pytest.approx(6.0)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           "--loads", str(tmp_path)], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.splitlines()[-2].endswith('{"flush_after_push": true}')
    assert done.stdout.splitlines()[-1].endswith("differ")


def _abba_start(folder: Path, p99s: tuple[float, ...], a: dict, b: dict) -> Path:
    """A start's folder of four loads (63-66 sessions) run A B B A with client p99s ``p99s``;
    the snapshots grow linearly, so every other figure is the same for each load."""
    folder.mkdir()
    for k, sessions in enumerate((0, 63, 64, 65, 66)):
        (folder / f"metrics-6-{sessions}.txt").write_text(
            _flush_snapshot(1.0 + k, 6.0, {"gpu_network": 1.2, "call": 0.7},
                            (f"ttball_push_frames_count {1000 * (1 + k)}",
                             f"ttball_push_frames_sum {2100 * (1 + k)}")))
    for sessions, p99, live in zip((63, 64, 65, 66), p99s, (a, b, b, a)):
        (folder / f"loadtest-6-{sessions}.json").write_text(
            json.dumps({"latency_ms": {"p99": p99}, "active_s": 8.0}))
        (folder / f"live-6-{sessions}.json").write_text(
            json.dumps({"replicas": {"r0": live, "r1": live}}))
    return folder


def test_pairs_compare_two_settings_within_each_start(tmp_path: Path) -> None:
    """``--pairs``: a start a row, B's loads' mean less A's (A: the first load's settings),
    A's drift (its last load less its first), only the settings that differ named; then the
    mean and sd over the starts that compared the same settings."""
    a = {"flush_after_push": False, "max_delay_ms": 2.0}
    b = {"flush_after_push": False, "max_delay_ms": 1.0}
    one = _abba_start(tmp_path / "p1", (50.0, 49.0, 51.0, 52.0), a, b)  # B - A: 50 - 51 = -1
    two = _abba_start(tmp_path / "p2", (48.0, 50.0, 51.0, 49.0), a, b)  # 50.5 - 48.5 = +2
    first, second = push_costs.paired([one, two])
    assert first["a"] == {"max_delay_ms": 2.0} and first["b"] == {"max_delay_ms": 1.0}
    assert first["d_p99"] == pytest.approx(-1.0) and second["d_p99"] == pytest.approx(2.0)
    assert first["drift_p99"] == pytest.approx(2.0) and second["drift_p99"] == pytest.approx(1.0)
    assert first["d_frames_a_push"] == pytest.approx(0.0)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           "--pairs", str(one), str(two)], capture_output=True, text=True,
                          timeout=60, check=True)
    mean, sd = done.stdout.splitlines()[-2:]
    assert mean.split()[0] == "0.500" and mean.endswith("mean of 2")
    assert sd.split()[0] == f"{math.sqrt(4.5):.3f}" and '{"max_delay_ms": 2.0} -> ' in sd


def test_pairs_refuse_a_start_with_one_setting(tmp_path: Path) -> None:
    same = {"flush_after_push": False}
    start = _abba_start(tmp_path / "p1", (50.0, 49.0, 51.0, 52.0), same, same)
    with pytest.raises(ValueError, match="1 live settings"):
        push_costs.paired([start])
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           "--pairs", str(start)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and "--pairs needs two" in done.stderr


def _replica_snapshot(load: dict[str, tuple[float, float, float, float]]) -> str:
    """A cumulative snapshot of replicas ``name: (frames, pushes, windows, stay seconds)``, the
    windows' stay all in the 10-20 ms bucket."""
    lines = []
    for name, (frames, pushes, windows, stay) in load.items():
        r = f'replica="{name}"'
        lines += [f"ttball_frames_total{{{r}}} {frames}",
                  f"ttball_push_frames_count{{{r}}} {pushes}",
                  f"ttball_push_frames_sum{{{r}}} {frames}",
                  f'ttball_window_seconds_bucket{{{r},le="0.01"}} 0.0',
                  f'ttball_window_seconds_bucket{{{r},le="0.02"}} {windows}',
                  f'ttball_window_seconds_bucket{{{r},le="+Inf"}} {windows}',
                  f"ttball_window_seconds_count{{{r}}} {windows}",
                  f"ttball_window_seconds_sum{{{r}}} {stay}"]
    return "\n".join(lines) + "\n"


def test_replicas_split_a_load_by_each_replicas_share(tmp_path: Path) -> None:
    """``--replicas``: a replica a row per load (differences of the cumulative snapshots): its
    share of the sessions from its frames over the load's active seconds × 60, frames a
    push, its windows' stay; within a load of two shares, the larger less the smaller."""
    (tmp_path / "metrics-2-0.txt").write_text(
        _replica_snapshot({"a": (100, 100, 30, 0.3), "b": (100, 100, 30, 0.3)}))
    # 8 s at 60 frames/s: 5,280 frames are 11 sessions, 4,800 ten
    # the network's GPU seconds of the flushes (replica a only): 1.9 s less 0.05 over 5,280 frames
    network = 'ttball_flush_seconds_total{{replica="a",stage="gpu_network"}} {}\n'
    (tmp_path / "metrics-2-0.txt").write_text(
        (tmp_path / "metrics-2-0.txt").read_text() + network.format(0.05))
    (tmp_path / "metrics-2-21.txt").write_text(
        _replica_snapshot({"a": (5380, 2500, 1790, 18.3), "b": (4900, 2500, 1630, 13.3)})
        + network.format(1.95))
    (tmp_path / "loadtest-2-21.json").write_text(
        json.dumps({"active_s": 8.0, "fps_per_session": 60.0, "latency_ms": {"p99": 40.0}}))
    a, b = push_costs.replica_loads(tmp_path)
    assert a["network_us"] == pytest.approx(1e6 * 1.9 / 5280)
    assert math.isnan(float(b["network_us"]))  # no flush times: not 0
    assert (a["replica"], b["replica"]) == ("a", "b")
    assert a["sessions"] == pytest.approx(11.0) and b["sessions"] == pytest.approx(10.0)
    assert a["frames_a_push"] == pytest.approx(5280 / 2400)
    assert b["frames_a_push"] == pytest.approx(2.0)
    assert a["stay_mean"] == pytest.approx(1e3 * 18.0 / 1760)
    assert 10.0 < a["stay_p99"] <= 20.0
    within = push_costs.share_differences([[a, b]])
    assert within["frames_a_push"] == [pytest.approx(5280 / 2400 - 2.0)]
    assert within["stay_mean"] == [pytest.approx(1e3 * (18.0 / 1760 - 13.0 / 1600))]
    assert push_costs.share_differences([[a]])["stay_mean"] == []  # one share: left out
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           "--replicas", str(tmp_path)], capture_output=True, text=True,
                          timeout=60, check=True)
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("  within 1 loads") and "frames_a_push +0.20" in lines[-1]
    assert "11 sessions: 1 replica-loads, frames a push 2.20" in done.stdout
    assert f"{1e6 * 1.9 / 5280:13.2f}  a" in done.stdout and f"{'nan':>13}  b" in done.stdout


def test_replicas_split_each_replica_into_its_lanes_where_the_worker_exports_them(
        tmp_path: Path) -> None:
    """With ``ttball_lane_stay_seconds`` / ``ttball_lane_batch_jobs`` (a worker since the
    fifty-sixth session), ``--replicas`` adds a row per lane ("<replica> lane <n>"): its share
    from its jobs (one frame each under the load test), jobs a batch as its frames a push, its
    jobs' stay; lanes are compared with lanes, replicas with replicas."""
    def snapshot(k: int) -> str:
        lines = [_replica_snapshot({"a": (5280.0 * k, 2400.0 * k, 1760.0 * k, 18.0 * k)})]
        for lane, (jobs, batches, stay) in {"0": (2400, 1200, 7.0), "1": (2880, 1200, 11.0)}.items():
            r = f'lane="{lane}",replica="a"'
            lines += [f"ttball_lane_batch_jobs_count{{{r}}} {batches * k}",
                      f"ttball_lane_batch_jobs_sum{{{r}}} {jobs * k}",
                      f'ttball_lane_stay_seconds_bucket{{{r},le="0.01"}} 0.0',
                      f'ttball_lane_stay_seconds_bucket{{{r},le="0.02"}} {jobs * k}',
                      f'ttball_lane_stay_seconds_bucket{{{r},le="+Inf"}} {jobs * k}',
                      f"ttball_lane_stay_seconds_count{{{r}}} {jobs * k}",
                      f"ttball_lane_stay_seconds_sum{{{r}}} {stay * k}"]
        return "\n".join(lines) + "\n"

    (tmp_path / "metrics-1-0.txt").write_text(snapshot(0))
    (tmp_path / "metrics-1-11.txt").write_text(snapshot(1))
    (tmp_path / "loadtest-1-11.json").write_text(
        json.dumps({"active_s": 8.0, "fps_per_session": 60.0, "latency_ms": {"p99": 40.0}}))
    rows = {row["replica"]: row for row in push_costs.replica_loads(tmp_path)}
    assert set(rows) == {"a", "a lane 0", "a lane 1"}
    assert rows["a"]["kind"] == "replica" and rows["a"]["sessions"] == pytest.approx(11.0)
    five, six = rows["a lane 0"], rows["a lane 1"]
    assert (five["kind"], five["sessions"], six["sessions"]) == ("lane", 5.0, 6.0)
    assert five["frames_a_push"] == pytest.approx(2.0) and six["frames_a_push"] == pytest.approx(2.4)
    assert six["stay_mean"] == pytest.approx(1e3 * 11.0 / 2880)
    within = push_costs.share_differences([[five, six]])
    assert within["frames_a_push"] == [pytest.approx(0.4)]
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_push_costs.py"),
                           "--replicas", str(tmp_path)], capture_output=True, text=True,
                          timeout=60, check=True)
    assert "6 sessions: 1 lane-loads, frames a push 2.40" in done.stdout
    assert "within 1 loads, the lanes with the larger share" in done.stdout
    assert "the replicas with the larger share" not in done.stdout  # one replica: nothing to pair
    # the summed tables are unchanged by the lanes' families
    assert "stay" in push_costs.histograms(snapshot(1))
    assert push_costs.histograms(snapshot(1))["stay"]["count"] == 1760.0

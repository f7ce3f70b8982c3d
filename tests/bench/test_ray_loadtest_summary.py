"""scripts/ray_loadtest_summary.py: gpu_ray_loadtest.sh's summary from hand-made files."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.script_env import load_script

summary = load_script("ray_loadtest_summary")

GPM = """\
# gpu    pwr  gtemp     sm    jpg   mclk      gract     smutil
# Idx      W      C      %      %    MHz      GPM:%      GPM:%
    0    127     37      0      0   3201          -          -
    0    200     38     40     30   3201   93360294         20
    0    300     39     60     50   3201         40         30
"""


def test_gpm_means_drop_dashes_and_impossible_percentages() -> None:
    path = Path(__file__).parent / "_gpm.txt"
    try:
        path.write_text(GPM)
        means = summary.gpm_means(str(path))
    finally:
        path.unlink()
    # gract: the 93-million-% sample and the "-" dropped; mclk (MHz) may exceed 100
    assert means == {"pwr": 209.0, "gtemp": 38.0, "sm": 33.3, "jpg": 26.7, "mclk": 3201.0,
                     "gract": 40.0, "smutil": 25.0}


def test_busy_shares_from_proc_stat_and_nvidia_smi(tmp_path: Path) -> None:
    (tmp_path / "cpu.txt").write_text("cpu 100 0 100 700 100 0 0\ncpu 200 0 200 1000 100 0 0\n")
    assert summary.host_cpu(str(tmp_path / "cpu.txt"))["busy_pct"] == 40.0  # 200 busy of 500 ticks
    assert summary.host_cpu(str(tmp_path / "cpu.txt"))["steal_pct"] is None  # no steal field
    (tmp_path / "vm.txt").write_text("cpu 100 0 100 700 100 0 0 10 5 0\n"
                                     "cpu 200 0 200 1000 100 0 0 60 30 0\n")
    # 50 stolen of 550 ticks (the guest's 25 are in user's already, not counted twice)
    assert summary.host_cpu(str(tmp_path / "vm.txt"))["steal_pct"] == 9.1
    assert summary.host_cpu(str(tmp_path / "vm.txt"))["busy_pct"] == 45.5  # steal is not idle
    # and since boot, to the first line: 10 of 1,010 ticks
    assert summary.host_cpu(str(tmp_path / "vm.txt"))["steal_boot_pct"] == 0.99
    (tmp_path / "gpu.csv").write_text("t, 30, 1980, 100\nt, 50, 1980, 120\nbroken line\n")
    assert summary.gpu_busy(str(tmp_path / "gpu.csv")) == 40.0
    assert summary.host_cpu(str(tmp_path / "missing.txt"))["busy_pct"] is None
    assert summary.gpu_busy(str(tmp_path / "missing.csv")) is None


def test_gil_share_by_thread_named_from_procs(tmp_path: Path) -> None:
    (tmp_path / "gil.txt").write_text(
        "thread (11): ttball-uvicorn;Runner.run (x.py:1) 300\n"
        "thread (12): ttball-backend_0;push (y.py:2) 100\n"
        "thread (11): ttball-uvicorn;ws_receive (z.py:3) 100\n")
    procs = [{"pid": 1, "cmd": "ray::ServeReplica:ttball:TTBallWorker", "cpu_pct": 90.0,
              "threads": 2, "top": [["tt-event-loop", 11, 60.0], ["tt-backend_0", 12, 30.0]]},
             {"pid": 2, "cmd": "ray::ServeReplica:ttball:TTBallIngress", "cpu_pct": 5.0,
              "threads": 1, "top": [["ray::IDLE", 21, 5.0]]}]
    (tmp_path / "procs.json").write_text(json.dumps(procs))
    gil = summary.gil_share(str(tmp_path / "gil.txt"), seconds=10, rate=100,
                            names=summary.thread_names(str(tmp_path / "procs.json")))
    assert gil == {"held_pct": 50.0, "failed_pct": None, "held_max_pct": None,  # no py-spy log
                   "by_thread_pct": {"tt-event-loop": 40.0, "tt-backend_0": 10.0}}
    (tmp_path / "gil.log").write_text("py-spy> Wrote raw flamegraph data to 'gil.txt'. "
                                      "Samples: 500 Errors: 76\n")
    gil = summary.gil_share(str(tmp_path / "gil.txt"), seconds=10, rate=100)
    assert gil is not None and gil["failed_pct"] == 7.6  # 76 of 1,000 sample times
    assert gil["held_max_pct"] == 57.6
    assert summary._gil_cell(gil) == ("50.0 (11 40.0, 12 10.0; up to 57.6 with 7.6 % failed "
                                      "samples)")
    assert summary.replica_cpu(str(tmp_path / "procs.json")) == [[90.0, 60.0]]  # workers only
    assert summary.gil_share(str(tmp_path / "none.txt"), 10) is None


def test_summarize_writes_the_tables_with_empty_cells_for_missing_files(tmp_path: Path) -> None:
    (tmp_path / "ready-4.json").write_text(json.dumps(
        {"time_to_ready_s": 65.0, "replicas": [{"event_loop": "uvloop"}] * 4}))
    load = {"sessions": 64, "achieved_fps": 3800.0, "offered_fps": 3840.0, "late": 3,
            "dropped": 0, "behind_schedule": 0, "errors": {},
            "latency_ms": {"p50": 30.0, "p95": 45.0, "p99": 49.0}}
    (tmp_path / "loadtest-4-64.json").write_text(json.dumps(load))
    (tmp_path / "loadtest-4-56.json").write_text(json.dumps({**load, "sessions": 56}))
    lines = summary.summarize(str(tmp_path), "triton-fp16-direct", "1,2", 8.0,
                              {"MPS": "1", "SM_PERCENT": "50", "DEVICE_PIPELINE": "1"})
    assert lines[0] == ("# ttball serve --ray: triton-fp16-direct, warm-up batches 1,2, device "
                        "pipeline, streams through the ingress, CUDA MPS (--mps-sm-percent 50)")
    assert "| 4 | 65.0 | uvloop |" in lines
    assert summary.mode({"MAX_DELAY_MS": "0"}).endswith(", --max-delay-ms 0")
    assert summary.mode({"FLUSH_THREAD": "1", "CARRY": "0"}).endswith(
        ", --flush-thread, --no-carry-windows")
    assert summary.mode({"FLUSH_AFTER": "1"}).endswith(", --flush-after-push")
    assert summary.mode({"LIVE": "1"}).endswith(", --live-settings")
    assert summary.mode({"ARRIVAL": "1"}).endswith(", --decode-on-arrival")
    rows = [line for line in lines if "| 3840.0 |" in line]
    assert [r.split(" | ")[1] for r in rows] == ["56", "64"]  # sorted by sessions
    assert rows[1].endswith("| None (None; None) | None |  |  |  |  |")
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["runs"][1]["latency_ms"]["p99"] == 49.0 and written["runs"][1]["gil"] is None
    assert (tmp_path / "SUMMARY.md").read_text().splitlines() == lines
    assert written["time_to_ready_s"] == {"4": 65.0}


def test_summarize_takes_an_empty_ready_file_for_a_server_never_ready(tmp_path: Path) -> None:
    """The server stopped during start-up (budget spent): its /readyz answer never came."""
    (tmp_path / "ready-4.json").write_text("")
    lines = summary.summarize(str(tmp_path), "triton-fp16-direct", "1,2", 8.0, {"MPS": "1"})
    assert "| 4 | None |  |" in lines
    assert json.loads((tmp_path / "summary.json").read_text())["time_to_ready_s"] == {"4": None}


def test_decode_children_are_counted_by_their_name(tmp_path: Path) -> None:
    """serve --decode-processes: the children named tt-decoder, summed; replicas apart."""
    procs = [{"pid": 1, "name": "ray::ServeRepli", "cmd": "ray::ServeReplica:ttball:TTBallWorker",
              "cpu_pct": 55.0, "top": [["tt-event-loop", 2, 28.0]]},
             {"pid": 3, "name": "tt-decoder", "cmd": "python3 -c from multiprocessing.spawn "
              "import spawn_main", "cpu_pct": 21.5, "top": [["tt-decoder", 3, 20.0]]},
             {"pid": 4, "name": "tt-decoder", "cmd": "python3 -c ...", "cpu_pct": 30.0,
              "top": [["tt-decoder", 4, 29.0]]},
             {"pid": 5, "name": "python3", "cmd": "python3 -c ... spawn_main", "cpu_pct": 90.0,
              "top": []}]
    (tmp_path / "procs.json").write_text(json.dumps(procs))
    assert summary.decoder_cpu(str(tmp_path / "procs.json")) == [2, 51.5, 30.0]
    assert summary.replica_cpu(str(tmp_path / "procs.json")) == [[55.0, 28.0]]
    (tmp_path / "old.json").write_text(json.dumps(procs[:1]))  # before names: no children
    assert summary.decoder_cpu(str(tmp_path / "old.json")) is None
    assert summary.decoder_cpu(str(tmp_path / "missing.json")) is None


def test_each_loads_live_settings_get_a_table_of_their_own(tmp_path: Path) -> None:
    """LIVE_<s> (``live-R-S.json``, the PUT's reply): the settings each load ran under, one
    value when every replica agrees, each replica's when not; no table without the files."""
    load = {"sessions": 63, "achieved_fps": 3780.0, "offered_fps": 3780.0, "late": 0,
            "dropped": 0, "behind_schedule": 0, "errors": {},
            "latency_ms": {"p50": 30.0, "p95": 45.0, "p99": 49.0}}
    (tmp_path / "ready-6.json").write_text(json.dumps({"replicas": []}))
    for s in (63, 64, 65):
        (tmp_path / f"loadtest-6-{s}.json").write_text(json.dumps({**load, "sessions": s}))
    assert not any("live settings" in line
                   for line in summary.summarize(str(tmp_path), "b", "1", 8.0, {}))
    on = {"flush_after_push": True, "max_delay_ms": 2.0}
    (tmp_path / "live-6-63.json").write_text(json.dumps({"replicas": {"a": on, "b": on}}))
    (tmp_path / "live-6-64.json").write_text(json.dumps(
        {"replicas": {"a": on, "b": {**on, "flush_after_push": False}}}))
    lines = summary.summarize(str(tmp_path), "b", "1", 8.0, {"LIVE": "1"})
    at = lines.index("| replicas | sessions | live settings (every replica) |")
    assert lines[at + 2] == '| 6 | 63 | {"flush_after_push": true, "max_delay_ms": 2.0} |'
    assert '"b": {"flush_after_push": false' in lines[at + 3]
    assert lines[at + 4] == "| 6 | 65 |  |"
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["runs"][0]["live"] == on and written["runs"][2]["live"] is None

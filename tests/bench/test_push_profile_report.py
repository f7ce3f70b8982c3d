"""scripts/push_profile_report.py on a small made-up trace."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.script_env import ROOT, load_script

report = load_script("push_profile_report")


def x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}


TRACE = {"traceEvents": [
    # the lane thread: a launch, a wait for a decode answer, its copy out, a gap of Python
    x("cuda_runtime", "cudaGraphLaunch", 1000, 300, correlation=7),
    x("cpu_op", "aten::slice", 6300, 100),  # 5 ms after the launch: a decode wait
    x("cpu_op", "aten::stack", 6900, 100),  # 0.5 ms of Python before it
    x("cuda_runtime", "cudaDeviceSynchronize", 8000, 9000),  # the profiler's own: left out
    x("cpu_op", "aten::mm", 0, 50, tid=2),  # another thread, fewer events
    # the graph's kernels: first 2 ms after the launch, 4 ms span, 1.5 ms of work
    x("kernel", "conv", 3000, 1000, correlation=7), x("kernel", "conv", 6000, 500, correlation=7),
    x("kernel", "other", 3000, 9, correlation=99),
]}


def test_graph_launches_read_span_busy_and_wait() -> None:
    (row,) = report.graph_launches(TRACE)
    assert row == pytest.approx({"launch_ms": 0.0, "kernels": 2, "to_first_ms": 2.0,
                                 "span_ms": 3.5, "busy_ms": 1.5})


def test_thread_split_tells_decode_waits_from_other_gaps() -> None:
    split = report.thread_split(TRACE)
    assert split == pytest.approx({"span_ms": 6.0, "calls_ms": 0.5, "decode_wait_ms": 5.0,
                                   "other_gaps_ms": 0.5, "before_decode_ms": 0.0,
                                   "before_read_back_ms": 0.0, "long_gaps_ms": 0.5,
                                   "long_gaps": 1, "short_gaps_ms": 0.0})
    assert report.thread_split({"traceEvents": []})["other_gaps_ms"] == 0.0


def test_other_gaps_are_split_by_where_they_end() -> None:
    trace = {"traceEvents": [
        x("cpu_op", "image::decode_jpegs_cuda", 0, 500),  # a push begins
        x("cpu_op", "aten::stack", 550, 50),  # 0.05 ms: a short gap
        x("cpu_op", "aten::to", 900, 100),  # 0.3 ms: a long one
        x("cuda_runtime", "cudaGraphLaunch", 1200, 100),  # 0.2 ms: long
        x("cuda_runtime", "cudaEventSynchronize", 2300, 700),  # 1 ms before the read-back
        x("cpu_op", "image::decode_jpegs_cuda", 7000, 500),  # 4 ms between pushes
    ]}
    split = report.thread_split(trace)
    assert split == pytest.approx({"span_ms": 7.5, "calls_ms": 1.95, "decode_wait_ms": 0.0,
                                   "other_gaps_ms": 5.55, "before_decode_ms": 4.0,
                                   "before_read_back_ms": 1.0, "long_gaps_ms": 0.5,
                                   "long_gaps": 2, "short_gaps_ms": 0.05})


def test_the_command_prints_both_and_refuses_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(TRACE, f)
    script = str(ROOT / "scripts" / "push_profile_report.py")
    out = subprocess.run([sys.executable, script, str(path), "--json"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assert json.loads(out)["thread"]["decode_wait_ms"] == pytest.approx(5.0)
    # three kernels, two of them the graph's (the third's launch is not in the trace)
    assert json.loads(out)["operations"] == pytest.approx({"total": 3, "in_graphs": 2,
                                                           "busy_ms": 1.509})
    text = subprocess.run([sys.executable, script, str(path), "--pushes", "2"],
                          capture_output=True, text=True, check=True, timeout=60).stdout
    assert "waiting before a decode answer 5.0 (83 %)" in text
    assert ("other gaps, ms: before a decode call 0.0, before a read-back's wait 0.0, elsewhere "
            "1 gaps of >= 0.1 ms 0.5 (mean 0.50), shorter ones 0.0") in text
    assert ("GPU operations: 3 (kernels, copies, memsets), 2 of them from graph launches, 2 a "
            "push; their own time 1.51 ms, 0.75 a push") in text
    (tmp_path / "bad.json").write_text("{not json")
    bad = subprocess.run([sys.executable, script, str(tmp_path / "bad.json")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode != 0 and "cannot read" in bad.stderr and "Traceback" not in bad.stderr
    # a trace cut off while it was written (the worker stopped): one line too
    (tmp_path / "cut.json.gz").write_bytes(path.read_bytes()[:-20])
    cut = subprocess.run([sys.executable, script, str(tmp_path / "cut.json.gz")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert cut.returncode != 0 and "cannot read" in cut.stderr and "Traceback" not in cut.stderr


def test_python_self_time_takes_each_call_s_children_out() -> None:
    trace = {"traceEvents": [
        x("python_function", "device.py(240): _push", 0, 10_000),
        x("python_function", "decode_process.py(322): receive", 1_000, 6_000),
        x("python_function", "<method 'recv_bytes' of '_multiprocessing.Connection'>", 1_500, 5_000),
        x("python_function", "prepost.py(640): _post", 7_000, 2_000),
        x("python_function", "<method 'synchronize' of 'Event'>", 7_100, 1_500),
        x("python_function", "other.py(1): idle", 0, 100, tid=2),  # another thread, fewer calls
    ]}
    got = report.python_self_time(trace)
    assert got["span_ms"] == pytest.approx(10.0)
    by_name = {name: (ms, calls) for name, ms, calls in got["functions"]}
    assert by_name["<method 'recv_bytes' of '_multiprocessing.Connection'>"] == pytest.approx((5.0, 1))
    assert by_name["decode_process.py(322): receive"] == pytest.approx((1.0, 1))
    assert by_name["device.py(240): _push"] == pytest.approx((2.0, 1))  # 10 - 6 - 2
    assert by_name["prepost.py(640): _post"] == pytest.approx((0.5, 1))
    assert got["functions"][0][0].startswith("<method 'recv_bytes'")  # the largest first
    assert "other.py(1): idle" not in by_name
    assert report.python_self_time(TRACE) == {"span_ms": 0.0, "functions": []}


def test_slow_metadata_ops_are_counted_on_the_busiest_thread() -> None:
    trace = {"traceEvents": [
        x("cpu_op", "aten::as_strided", 0, 2),
        x("cpu_op", "aten::view", 10, 400),  # 0.4 ms for a view: descheduled
        x("cpu_op", "aten::empty", 500, 60),
        x("cpu_op", "aten::conv2d", 600, 5000),  # real work: not counted
        x("cpu_op", "aten::view", 0, 900, tid=2),  # another thread, fewer events
    ]}
    assert report.slow_metadata_ops(trace) == pytest.approx({"ops": 3, "slow": 2,
                                                             "slow_ms": 0.46})
    assert report.slow_metadata_ops({"traceEvents": []}) == {"ops": 0, "slow": 0, "slow_ms": 0.0}

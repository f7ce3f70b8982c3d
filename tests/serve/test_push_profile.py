"""ttball.serve.push_profile: TTBALL_PROFILE_PUSHES profiles a lane's pushes once a folder."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from ttball.serve import push_profile
from ttball.serve.push_profile import ENV, STACK_ENV, PushProfiler, summarize


def test_unset_means_no_profiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert PushProfiler.from_env() is None


@pytest.mark.parametrize("value", ["3:2", "a:2:/tmp/x", "0:2:/tmp/x", "2:0:/tmp/x"])
def test_a_bad_value_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ENV, value)
    with pytest.raises(ValueError, match=ENV):
        PushProfiler.from_env()


def test_the_first_lane_to_get_there_profiles_its_pushes_and_the_others_do_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, f"2:3:{tmp_path / 'prof'}")
    lanes = [PushProfiler.from_env(), PushProfiler.from_env()]
    assert all(lane is not None for lane in lanes)
    for _ in range(5):
        for lane in lanes:
            with lane.push():  # type: ignore[union-attr]
                torch.ones(64, 64) @ torch.ones(64, 64)
    written = [lane.written for lane in lanes]  # type: ignore[union-attr]
    assert written == [tmp_path / "prof", None]
    summary = json.loads((tmp_path / "prof" / "summary.json").read_text())
    assert summary["pushes"] == 3 and (tmp_path / "prof" / "trace.json.gz").exists()
    assert not (tmp_path / "prof" / "trace.json").exists()


def test_a_trace_cut_while_written_is_not_left_under_its_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker stopped while the trace is written leaves no ``trace.json.gz`` that is cut off
    (the report would fail on it); a complete one is renamed into place."""
    monkeypatch.setenv(ENV, f"1:1:{tmp_path / 'prof'}")
    lane = PushProfiler.from_env()
    assert lane is not None

    def stopped(obj: object, f: Any) -> None:
        f.write(json.dumps(obj)[:100])
        raise KeyboardInterrupt

    monkeypatch.setattr(push_profile.json, "dump", stopped)
    with pytest.raises(KeyboardInterrupt), lane.push():
        torch.ones(8, 8) @ torch.ones(8, 8)
    assert not (tmp_path / "prof" / "trace.json.gz").exists()
    assert not (tmp_path / "prof" / "summary.json").exists()
    assert not list((tmp_path / "prof").glob(".trace.json.gz.*"))  # nor its temporary file


@pytest.mark.parametrize("stack", [False, True])
def test_profile_stack_records_the_python_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                stack: bool) -> None:
    monkeypatch.setenv(ENV, f"1:1:{tmp_path / 'prof'}")
    monkeypatch.setenv(STACK_ENV, "1" if stack else "0")
    lane = PushProfiler.from_env()
    assert lane is not None and lane.stack is stack

    def lane_step() -> torch.Tensor:
        return torch.ones(8, 8) @ torch.ones(8, 8)

    with lane.push():
        lane_step()
    with gzip.open(tmp_path / "prof" / "trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    named = [e["name"] for e in events if e.get("cat") == "python_function"]
    assert any("lane_step" in name for name in named) is stack


def test_summarize_reads_each_streams_busy_time_span_and_gaps() -> None:
    def op(name: str, ts: float, dur: float, stream: int, cat: str = "kernel") -> dict:
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"stream": stream}}

    trace = {"traceEvents": [
        op("conv", 0, 10, 7), op("conv", 30, 10, 7), op("Memcpy DtoD", 45, 5, 7, "gpu_memcpy"),
        op("resize", 5, 2, 9), {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 99},
    ]}
    summary = summarize(trace)
    assert summary["streams"]["7"] == {"ops": 3, "busy_us": 25.0, "span_us": 50.0,
                                       "largest_gap_us": 20.0}
    assert summary["streams"]["9"]["ops"] == 1
    assert summary["top"][0] == {"name": "conv", "count": 2, "total_us": 20.0, "stream": 7,
                                 "mean_us": 10.0}
    assert [t["name"] for t in summary["top"]] == ["conv", "Memcpy DtoD", "resize"]

"""scripts/gil_convoy.py: its rows and its errors (no timings asserted: CI's cores are shared)."""

from __future__ import annotations

import json
import sys

import pytest
from script_env import load_script

convoy = load_script("gil_convoy")


def test_every_loop_is_timed_alone_and_beside_a_busy_thread_at_each_interval(tmp_path) -> None:
    before = sys.getswitchinterval()
    out = tmp_path / "convoy.json"
    assert convoy.main(["--switch-ms", "5", "1", "--frames", "3", "--blob-kb", "2",
                        "--reps", "2", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["switch_ms"], r["busy_thread"], r["loop"]) for r in rows} == {
        (ms, busy, loop) for ms in (5.0, 1.0) for busy in (False, True)
        for loop in ("numpy_copies", "memoryview_copies", "torch_clones")}
    assert all(0 <= r["p50_ms"] <= r["max_ms"] for r in rows)
    assert sys.getswitchinterval() == before  # put back


def test_the_copies_write_the_same_bytes() -> None:
    fns, inbox, blobs = convoy.loops(4, 1000)
    fns["memoryview_copies"]()
    assert inbox.tobytes() == b"".join(blobs)
    inbox[:] = 0
    fns["numpy_copies"]()
    assert inbox.tobytes() == b"".join(blobs)


@pytest.mark.parametrize("args", [["--frames", "0"], ["--switch-ms", "0"], ["--reps", "0"]])
def test_bad_arguments_stop_with_one_line(args, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        convoy.main(args)
    assert exc.value.code == 2
    assert "must be" in capsys.readouterr().err

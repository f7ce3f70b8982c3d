"""scripts/proc_cpu.py: per-process and per-thread CPU % between two /proc snapshots."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bench.script_env import load_script

proc_cpu = load_script("proc_cpu")

BUSY_THREAD = """
import threading, time, sys
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
print("up", flush=True)
time.sleep(30)
"""


def test_ticks_are_counted_from_the_last_parenthesis() -> None:
    fields = ["S"] + ["0"] * 10 + ["150", "25"] + ["0"] * 30  # utime 150, stime 25
    assert proc_cpu._ticks("42 (odd) name) " + " ".join(fields)) == ("odd) name", 175)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_a_spinning_thread_shows_as_a_busy_core_and_an_idle_process_does_not() -> None:
    marker = f"proc-cpu-test-{time.monotonic_ns()}"
    busy = subprocess.Popen([sys.executable, "-c", BUSY_THREAD, marker], stdout=subprocess.PIPE, text=True)
    idle = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)",
                             marker], stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout.readline().strip() == "up" and idle.stdout.readline().strip() == "up"
        before = proc_cpu.snapshot(marker)
        time.sleep(0.6)
        rows = proc_cpu.diff(before, proc_cpu.snapshot(marker))
    finally:
        busy.kill()
        idle.kill()
    by_pid = {r["pid"]: r for r in rows}
    assert set(by_pid) == {busy.pid, idle.pid}  # this test's own process is not matched
    spinning = by_pid[busy.pid]
    assert spinning["cpu_pct"] > 40 and spinning["top"][0][2] > 40 and spinning["threads"] >= 2
    assert by_pid[idle.pid]["cpu_pct"] < 20
    assert rows[0]["pid"] == busy.pid  # busiest first
    assert by_pid[busy.pid]["name"] == Path(f"/proc/{busy.pid}/comm").read_text().strip() != ""


def test_diff_on_the_command_line_reports_a_bad_snapshot_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"time": 1, "clk_tck": 100, "procs": {}}')
    (tmp_path / "b.json").write_text("not json")
    done = subprocess.run([sys.executable, str(proc_cpu.__file__), "diff", str(tmp_path / "a.json"),
                           str(tmp_path / "b.json")], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "proc_cpu:" in done.stderr

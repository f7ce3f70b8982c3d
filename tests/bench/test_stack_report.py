"""scripts/stack_report.py: a thread's wall time by innermost frame, from py-spy's raw stacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.script_env import load_script

ROOT = Path(__file__).resolve().parents[2]
stack_report = load_script("stack_report")

RAW = """\
thread (101): tt-backend_0;run (threading.py:982);_push (ttball/serve/device.py:240);push (ttball/kernels/prepost.py:355);receive (ttball/kernels/decode_process.py:322);_receive (ttball/kernels/decode_process.py:360);recv (connection.py:250) 60
thread (101): tt-backend_0;run (threading.py:982);_push (ttball/serve/device.py:240);push (ttball/kernels/prepost.py:559);clone (torch/utils.py:5) 30
thread (101);run (threading.py:982);_push (ttball/serve/device.py:240) 10
thread (202);run_forever (asyncio/base_events.py:600);select (selectors.py:468) 20
py-spy> Wrote raw flamegraph data
"""


def test_a_thread_s_samples_split_by_innermost_frame_and_by_our_innermost_frame() -> None:
    threads = stack_report.parse(RAW.splitlines())
    backend = threads["101"]
    assert backend.name == "tt-backend_0" and backend.samples == 100  # the unnamed line joins it
    assert backend.innermost()["recv (connection.py:250)"] == 60
    ours = backend.innermost_package()
    assert ours["_receive (ttball/kernels/decode_process.py:360)"] == 60
    assert ours["push (ttball/kernels/prepost.py:559)"] == 30
    assert ours["_push (ttball/serve/device.py:240)"] == 10
    assert threads["202"].innermost_package() == {"(outside ttball/)": 20}
    text = stack_report.report(threads, {"202": "tt-event-loop"}, top=2)
    assert text.splitlines()[0] == "2 threads, 120 samples"
    assert "thread 101 tt-backend_0: 100 samples" in text and " 60.0 %  recv (connection.py:250)" in text
    assert "thread 202 tt-event-loop: 20 samples" in text  # named from the procs file
    ours_listed = text.split("innermost ttball/ frame:")[1].split("thread 202")[0]
    assert "decode_process.py:360" in ours_listed and "prepost.py:559" in ours_listed
    assert "device.py:240" not in ours_listed  # the third of thread 101's, past top=2


def test_the_script_names_threads_from_a_procs_file_and_refuses_an_empty_file(tmp_path: Path) -> None:
    stacks, procs = tmp_path / "stacks.txt", tmp_path / "procs.json"
    stacks.write_text(RAW)
    procs.write_text(json.dumps([{"top": [["tt-event-loop", 202, 30.0]]}]))
    script = str(ROOT / "scripts" / "stack_report.py")
    done = subprocess.run([sys.executable, script, str(stacks), "--procs", str(procs), "--top", "1"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert "thread 202 tt-event-loop: 20 samples" in done.stdout
    assert " 60.0 %  recv (connection.py:250)" in done.stdout
    assert "clone (torch/utils.py:5)" not in done.stdout  # --top 1
    (tmp_path / "empty.txt").write_text("py-spy> nothing\n")
    done = subprocess.run([sys.executable, script, str(tmp_path / "empty.txt")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "no py-spy --threads raw stacks" in done.stderr

"""scripts/stats_kernels.py on the CPU: each fused-windows level's launches for one call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.script_env import run_script

pytest.importorskip("triton", reason="triton is not installed (the dev extra installs it)")


def test_each_level_launches_fewer(tmp_path: Path) -> None:
    """In Triton's interpreter the fused path runs on the CPU: level 0 launches the peaks' and
    the flood's kernels among ~100 ops, level 1 two kernels more and ~65 ops fewer, level 2
    one kernel a window and the fewest ops."""
    out = tmp_path / "kernels.json"
    run_script("stats_kernels", "--device", "cpu", "--batch", "2", "--size", "40x72", "--out",
               str(out), TRITON_INTERPRET="1")
    rows = {r["level"]: r for r in json.loads(out.read_text())["rows"]}
    assert [rows[level]["triton_launches"] for level in "012"] == [2, 4, 3]
    ops = [rows[level]["operations"] for level in "012"]
    assert ops[0] > 90 and 40 > ops[1] > ops[2] >= 10, rows

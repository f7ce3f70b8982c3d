"""scripts/step_groups.py on the committed per-step times of the thirteenth session, with and
without the fourteenth session's tail steps put in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEPS = ROOT / "docs/benchmarks/h200-2026-12-01e/direct/kernels-steps.json.gz"
TAIL = ROOT / "docs/benchmarks/h200-2026-12-01f/tail/tail-ab.json"


def _run(*args: str) -> str:
    return subprocess.run([sys.executable, str(ROOT / "scripts/step_groups.py"), str(STEPS),
                           *args], capture_output=True, text=True, timeout=120,
                          check=True).stdout


def _ms(out: str, group: str) -> float:
    line = next(row for row in out.splitlines() if row.startswith(f"| {group} |"))
    return float(line.split("|")[3])


def test_groups_cover_every_step_once() -> None:
    out = _run("--batch", "64")
    assert "| sum | 67 |" in out
    counts = [int(row.split("|")[2]) for row in out.splitlines()
              if row.startswith("| ") and not row.startswith(("| group", "| sum"))]
    assert sum(counts) == 67 and len(counts) == 4


def test_the_later_tails_replace_the_earlier_ones() -> None:
    before, after = _run("--batch", "64"), _run("--batch", "64", "--override", str(TAIL))
    assert "steps [17, 31, 37, 53, 59, 65, 66] from tail-ab.json" in after
    tails = "block tails (SE, residual, fuse outputs, head)"
    # the head tail went from 0.86 to 0.34 ms; six producing tails took 0.13 ms more
    assert 0.3 < _ms(before, tails) - _ms(after, tails) < 0.5
    convs = "BasicBlock 3x3 convolutions"
    assert _ms(before, convs) == _ms(after, convs)

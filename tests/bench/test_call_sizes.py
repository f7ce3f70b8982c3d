"""scripts/call_sizes.py: a run's network calls by padded size and their cost at the network's
own times, on hand-made snapshots and a bench table."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.bench.script_env import load_script

call_sizes = load_script("call_sizes")

BENCH = """| variant | batch | median ms | min–max ms |
|---|---|---|---|
| triton-fp16-direct | 1 | 0.5 | 0.5–0.5 |
| triton-fp16-direct | 2 | 0.8 | 0.8–0.8 |
| triton-fp16-direct | 4 | 1.2 | 1.2–1.2 |
| other | 4 | 9.0 | 9.0–9.0 |
"""


def _snapshot(buckets: dict[str, float], count: float, total: float, padding: float,
              replicas: tuple[str, ...] = ("a",)) -> str:
    """Prometheus text of the batch-size histogram and the padding counter, each replica an
    equal share."""
    lines = []
    for name in replicas:
        share, label = 1 / len(replicas), f'replica="{name}"'
        lines += [f'ttball_batch_size_bucket{{le="{le}",{label}}} {v * share}'
                  for le, v in buckets.items()]
        lines += [f"ttball_batch_size_count{{{label}}} {count * share}",
                  f"ttball_batch_size_sum{{{label}}} {total * share}",
                  f"ttball_batch_padding_total{{{label}}} {padding * share}"]
    return "\n".join(lines) + "\n"


def test_calls_are_counted_at_their_padded_size_between_the_snapshots(tmp_path: Path) -> None:
    before = {"1.0": 1, "2.0": 1, "3.0": 1, "4.0": 1, "6.0": 1, "+Inf": 1}
    # after: 2 more calls of 1 window, 3 of 2, 4 of 3 (padded to 4), 1 of 4
    after = {"1.0": 3, "2.0": 6, "3.0": 10, "4.0": 11, "6.0": 11, "+Inf": 11}
    (tmp_path / "before.txt").write_text(_snapshot(before, 1, 1, 0))
    (tmp_path / "after.txt.gz").write_bytes(gzip.compress(
        _snapshot(after, 11, 1 + 2 + 6 + 12 + 4, 0 + 4).encode()))
    (tmp_path / "bench.md").write_text(BENCH)
    lines = call_sizes.report(call_sizes.read_text(tmp_path / "after.txt.gz"),
                              call_sizes.read_text(tmp_path / "before.txt"), BENCH,
                              "triton-fp16-direct")
    assert lines[1:4] == ["     1        2     0.500", "     2        3     0.800",
                          "     4        5     1.200"]
    # 24 windows in 10 calls; rows 2 + 6 + 20 = 28, padding 4; 2*0.5 + 3*0.8 + 5*1.2 = 9.4 ms
    assert lines[4].startswith("calls 10, windows 24 (2.40 a call), rows run 28 (padding 4: 16.7 %")
    assert lines[4].endswith("the counter says 4)")
    assert lines[5].startswith("network alone: 0.009 s, 391.7 us a window; in full calls of 4: "
                               "300.0 us a window (+30.6 %")
    assert call_sizes.main([str(tmp_path / "after.txt.gz"), str(tmp_path / "before.txt"),
                            "--bench", str(tmp_path / "bench.md")]) == 0


def test_replicas_are_summed() -> None:
    buckets = {"1.0": 2, "2.0": 2, "3.0": 2, "4.0": 4, "+Inf": 4}
    text = _snapshot(buckets, 4, 10, 0, replicas=("a", "b"))
    lines = call_sizes.report(text, None, BENCH, "triton-fp16-direct")
    assert lines[1] == "     1        2     0.500" and lines[3] == "     4        2     1.200"


def test_what_cannot_be_counted_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # calls of 5-6 windows when the largest warmed size is 4
    bench = BENCH
    text = _snapshot({"4.0": 0, "6.0": 3, "+Inf": 3}, 3, 15, 0)
    with pytest.raises(ValueError, match="more than the largest size"):
        call_sizes.report(text, None, bench, "triton-fp16-direct")
    wide = bench + "| triton-fp16-direct | 3 | 1.0 | 1.0–1.0 |\n"
    text = _snapshot({"2.0": 0, "4.0": 3, "+Inf": 3}, 3, 10, 0)
    with pytest.raises(ValueError, match=r"the bucket \(2, 4\] spans the sizes 3 and 4"):
        call_sizes.report(text, None, wide, "triton-fp16-direct")
    with pytest.raises(ValueError, match="no rows of 'nope'"):
        call_sizes.report(text, None, bench, "nope")
    (tmp_path / "m.txt").write_text(_snapshot({"+Inf": 0}, 0, 0, 0))
    (tmp_path / "b.md").write_text(bench)
    assert call_sizes.main([str(tmp_path / "m.txt"), "--bench", str(tmp_path / "b.md")]) == 2
    assert capsys.readouterr().err.strip() == "call_sizes: no network calls between the snapshots"

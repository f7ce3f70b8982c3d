"""``ttball bench --out`` cut short: a complete report already there is left as it was (the rows
go to ``bench.partial.*``), and every file of a partial report says it is partial."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from ttball.backends import base
from ttball.backends.eager import EagerBackend
from ttball.bench import ROW_KEYS
from ttball.bench.report import PARTIAL_BANNER, partial_name
from ttball.cli import COMMANDS, main

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

KILLED = "test-killed-at-2-fp32"
COMPLETE = ("bench.json", "bench.csv", "bench.md", "bench.png")
PARTIAL = ("bench.partial.json", "bench.partial.csv", "bench.partial.md")


class _KilledAtBatch2(EagerBackend):
    """Eager FP32 until a batch of 2 arrives: then Ctrl-C."""

    def run(self, batch: torch.Tensor) -> torch.Tensor:
        if batch.shape[0] == 2:
            raise KeyboardInterrupt
        return super().run(batch)


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """``bench(out, variants)``: a small CPU run into ``out``, batches 1 and 2; its exit code."""
    monkeypatch.setitem(COMMANDS, "bench", ("ttball.cli.bench", "measure the backends"))
    entry = base.BackendSpec(KILLED, _KilledAtBatch2, "killed", base._always, frozenset({"fp32"}))
    monkeypatch.setitem(base._REGISTRY, KILLED, entry)

    def run(out: Path, variants: str) -> int:
        return main(["bench", "--quick", "--device", "cpu", "--size", "48x64", "--no-profile",
                     "--batch", "1,2", "--variants", variants, "--out", str(out)])

    return run


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _check_marked_partial(out: Path, stem: str) -> None:
    """``out/stem.*`` hold the rows measured before Ctrl-C, each file marked partial."""
    saved = json.loads((out / f"{stem}.json").read_text())
    assert saved["meta"]["partial"] is True
    got = [(r["variant"], r["batch"]) for r in saved["rows"]]
    assert got == [("eager-fp32", 1), ("eager-fp32", 2), (KILLED, 1)]
    with open(out / f"{stem}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [*ROW_KEYS, "partial"] and {r["partial"] for r in rows} == {"True"}
    md = (out / f"{stem}.md").read_text()
    assert PARTIAL_BANNER in md and f"| {KILLED} | 1 |" in md


def test_a_run_cut_short_leaves_a_complete_report_as_it_was(
    tmp_path: Path, bench, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert bench(out, "eager-fp32") == 0
    complete = _files(out)
    assert sorted(complete) == sorted(COMPLETE)
    assert PARTIAL_BANNER not in complete["bench.md"].decode()
    capsys.readouterr()

    assert bench(out, f"eager-fp32,{KILLED}") == 130
    assert capsys.readouterr().err.endswith("ttball bench: interrupted\n")
    now = _files(out)
    assert {k: now[k] for k in COMPLETE} == complete  # the plot too: it matches them
    assert sorted(now) == sorted(COMPLETE + PARTIAL)
    _check_marked_partial(out, "bench.partial")

    # a run that finishes replaces the complete report and removes the partial one
    assert bench(out, "eager-fp32") == 0
    assert sorted(_files(out)) == sorted(COMPLETE)
    assert json.loads((out / "bench.json").read_text())["meta"]["partial"] is False


def test_a_partial_report_in_place_of_none_is_marked_in_every_file(
    tmp_path: Path, bench
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    # what an earlier run cut short left under the old rule: partial rows beside another run's
    # plot; it is replaced, and the plot, which matches no rows of this run, goes
    (out / "bench.json").write_text('{"meta": {"partial": true}, "rows": []}\n')
    (out / "bench.png").write_bytes(b"\x89PNG\r\n\x1a\nanother run's")
    assert bench(out, f"eager-fp32,{KILLED}") == 130
    assert sorted(_files(out)) == ["bench.csv", "bench.json", "bench.md"]
    _check_marked_partial(out, "bench")


@pytest.mark.parametrize(
    "files, name",
    [
        ({}, "bench"),
        ({"bench.json": '{"meta": {"partial": true}, "rows": []}'}, "bench"),
        ({"bench.json": '{"meta": {"partial": false}, "rows": []}'}, "bench.partial"),
        ({"bench.json": '{"meta": {}, "rows": []}'}, "bench.partial"),  # before meta.partial
        ({"bench.json": "not json"}, "bench.partial"),
        ({"bench.json": "[1, 2]"}, "bench.partial"),
        ({"bench.md": "# a report"}, "bench.partial"),
        ({"bench.partial.json": "{}"}, "bench"),
    ],
)
def test_partial_name(tmp_path: Path, files: dict[str, str], name: str) -> None:
    for file, text in files.items():
        (tmp_path / file).write_text(text)
    assert partial_name(tmp_path) == name

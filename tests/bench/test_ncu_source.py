"""scripts/ncu_source.py on a stand-in for an ``ncu_report`` action (the reader is NVIDIA's,
not a dependency): a loop of two instructions run 100 times, and once-run code."""

from __future__ import annotations

from typing import ClassVar

from script_env import load_script

ncu_source = load_script("ncu_source")


class _Ids:
    def __init__(self, pcs: list[int]) -> None:
        self.pcs = pcs

    def as_uint64(self, i: int) -> int:
        return self.pcs[i]


class _Metric:
    def __init__(self, values: dict[int, int]) -> None:
        self.pcs, self.values = list(values), list(values.values())

    def correlation_ids(self) -> _Ids:
        return _Ids(self.pcs)

    def num_instances(self) -> int:
        return len(self.pcs)

    def as_uint64(self, i: int) -> int:
        return self.values[i]


class _Action:
    """Program: 0x10 once, 0x20 and 0x30 (the loop) 100 times, 0x40 once."""

    metrics: ClassVar[dict[str, dict[int, int]]] = {
        "inst_executed": {0x10: 1, 0x20: 100, 0x30: 100, 0x40: 1},
        "smsp__pcsamp_sample_count": {0x10: 2, 0x20: 5, 0x30: 90, 0x40: 3},
        ncu_source.STALL + "long_scoreboard": {0x30: 80, 0x40: 0},
        ncu_source.STALL + "wait": {0x20: 5, 0x30: 10, 0x40: 3},
        ncu_source.STALL + "wait_not_issued": {0x30: 999},
    }
    sass: ClassVar[dict[int, str]] = {
        0x10: "S2R R0, SR_TID.X", 0x20: "LDGSTS [R1], [R2.64]", 0x30: "@!P0 BRA 0x20",
        0x40: "EXIT"}

    def name(self) -> str:
        return "conv3x3_wgmma_kernel"

    def metric_names(self) -> list[str]:
        return list(self.metrics)

    def metric_by_name(self, name: str) -> _Metric:
        return _Metric(self.metrics[name])

    def sass_by_pc(self, pc: int) -> str:
        return self.sass[pc]


def test_reads_counts_samples_and_stall_reasons() -> None:
    src = ncu_source.read(_Action())
    assert src.executed == {0x10: 1, 0x20: 100, 0x30: 100, 0x40: 1}
    assert src.reasons[0x30] == {"long_scoreboard": 80, "wait": 10}  # not_issued left out
    assert 0x10 not in src.reasons  # no stall sampled there
    lines = ncu_source.table(src)
    assert lines[0] == "# conv3x3_wgmma_kernel: 202 warp instructions, 100 samples"
    assert lines[4] == "30 100 90 @!P0 BRA 0x20 [('long_scoreboard', 80), ('wait', 10)]"
    assert len(lines) == 2 + 4


def test_groups_split_the_loop_from_once_run_code() -> None:
    loop, once = ncu_source.groups(ncu_source.read(_Action()))
    assert loop[:2] == (100, 2) and once[:2] == (1, 2)
    assert abs(loop[2] - 100 * 200 / 202) < 1e-9 and abs(loop[3] - 95.0) < 1e-9
    assert abs(once[3] - 5.0) < 1e-9

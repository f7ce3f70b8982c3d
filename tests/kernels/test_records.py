"""Tuning records (ttball.kernels.records): found by what a tuning depends on, taken instead of
tuning, tuned and written again when they do not load or do not run; one process tunes a
shape while others wait for its record; the executor's first call with given configurations
computes what the plan computes."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from kernel_env import CUDA, DEVICE, require_triton

from ttball.kernels import build_plan, run_reference
from ttball.kernels.records import (
    RECORD,
    TUNED,
    TuningRecords,
    record_key,
    records_folder,
    shapes_of,
    source_digest,
    tuned_or_recorded,
)
from ttball.model import BlurBall, randomize_batchnorm

require_triton()
from ttball.kernels.configs import Config
from ttball.kernels.executor import TritonExecutor

IDENTITY = {"gpu": "NVIDIA H200", "capability": [9, 0], "sms": 132, "driver": "580.95.05",
            "torch": "2.11", "triton": "3.5", "cuda": "13.0"}
OPTIONS = {"branches": True, "direct": True}
A, B = Config(64, 4, 2), Config(128, 8, 3, tile_w=16)


@pytest.fixture(scope="module")
def plan():
    return build_plan(randomize_batchnorm(BlurBall(), seed=0).eval())


def test_a_key_follows_shapes_options_machine_and_sources_not_weights(plan) -> None:
    key = record_key(plan, (16, 9, 288, 512), OPTIONS, IDENTITY, sources="s")
    assert key == record_key(plan, (16, 9, 288, 512), OPTIONS, IDENTITY, sources="s")
    other_weights = build_plan(randomize_batchnorm(BlurBall(), seed=1).eval())
    assert record_key(other_weights, (16, 9, 288, 512), OPTIONS, IDENTITY, sources="s") == key
    assert len({key,
                record_key(plan, (8, 9, 288, 512), OPTIONS, IDENTITY, sources="s"),
                record_key(plan, (16, 9, 288, 512), {**OPTIONS, "direct": False}, IDENTITY,
                           sources="s"),
                record_key(plan, (16, 9, 288, 512), OPTIONS, {**IDENTITY, "gpu": "NVIDIA H100"},
                           sources="s"),
                record_key(plan, (16, 9, 288, 512), OPTIONS, {**IDENTITY, "triton": "3.6"},
                           sources="s"),
                record_key(plan, (16, 9, 288, 512), OPTIONS, {**IDENTITY, "driver": "590.1"},
                           sources="s"),
                record_key(plan, (16, 9, 288, 512), OPTIONS, IDENTITY, sources="t"),
                record_key(build_plan(randomize_batchnorm(BlurBall(), seed=0).eval(),
                                      project_terms="conv"),
                           (16, 9, 288, 512), OPTIONS, IDENTITY, sources="s")}) == 8


def test_records_live_in_the_cache_folder_given_else_in_ttball_s_own(tmp_path,
                                                                      monkeypatch) -> None:
    assert records_folder(tmp_path / "c") == tmp_path / "c" / "tuning"
    monkeypatch.setenv("TTBALL_CACHE_DIR", str(tmp_path / "own"))
    assert records_folder() == tmp_path / "own" / "tuning"


def test_the_environment_turns_records_off_and_refuses_other_values(monkeypatch) -> None:
    from ttball.errors import UserError
    from ttball.kernels.records import records_wanted

    monkeypatch.delenv("TTBALL_TUNING_RECORDS", raising=False)
    assert records_wanted()
    monkeypatch.setenv("TTBALL_TUNING_RECORDS", "0")
    assert not records_wanted()
    monkeypatch.setenv("TTBALL_TUNING_RECORDS", " 1 ")
    assert records_wanted()
    monkeypatch.setenv("TTBALL_TUNING_RECORDS", "off")
    with pytest.raises(UserError, match="must be 0 or 1, got 'off'"):
        records_wanted()


def test_shapes_stand_for_tensors_and_the_sources_digest_covers_the_kernel_files(tmp_path) -> None:
    step = build_plan(BlurBall().eval()).steps[0]
    described = shapes_of(step)
    assert described["type"] == type(step).__name__
    assert described["terms"][0]["weight"] == {"shape": list(step.terms[0].weight.shape),
                                               "dtype": "torch.float32"}
    (tmp_path / "k.py").write_text("a = 1\n")
    (tmp_path / "k.cu").write_text("// b\n")
    (tmp_path / "notes.md").write_text("not a source\n")
    before = source_digest(tmp_path)
    (tmp_path / "notes.md").write_text("changed\n")
    assert source_digest.__wrapped__(tmp_path) == before
    (tmp_path / "k.cu").write_text("// c\n")
    assert source_digest.__wrapped__(tmp_path) != before
    assert len(source_digest()) == 64


class Fake:
    """A shape's first call as the backend makes it: adopt given configurations or tune."""

    def __init__(self, chosen: list[Config], tune_s: float = 0.0, adopt_error: bool = False):
        self.chosen, self.tune_s, self.adopt_error = chosen, tune_s, adopt_error
        self.adopted: list[list[Config]] = []
        self.tunes = 0

    def adopt(self, configs: list[Config]) -> None:
        if self.adopt_error:
            raise RuntimeError("the kernel no longer compiles")
        self.adopted.append(configs)

    def tune(self) -> list[Config]:
        self.tunes += 1
        time.sleep(self.tune_s)
        return self.chosen

    def first(self, records: TuningRecords, key: str = "k") -> tuple[str, str | None]:
        return tuned_or_recorded(records, key, len(self.chosen), self.adopt, self.tune,
                                 {"shape": [1, 9, 72, 128]})


def test_the_first_call_tunes_and_records_the_next_takes_the_record(tmp_path) -> None:
    records = TuningRecords(tmp_path / "tuning")
    first = Fake([A, B])
    assert first.first(records) == (TUNED, "no record") and first.tunes == 1
    saved = json.loads(records.path("k").read_text())
    assert saved["shape"] == [1, 9, 72, 128] and saved["configs"][1]["tile_w"] == 16
    second = Fake([B, B])
    assert second.first(records) == (RECORD, None)
    assert second.tunes == 0 and second.adopted == [[A, B]]


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": 99, "configs": []}),
                                     json.dumps({"format": 1, "configs": [{"block_m": 64}] * 2}),
                                     json.dumps({"format": 1, "configs": [
                                         {"block_m": 64, "num_warps": 4, "num_stages": 2,
                                          "colour": "red"}] * 2})],
                         ids=["garbled", "other-format", "missing-field", "unknown-field"])
def test_a_record_that_does_not_load_is_tuned_again_and_rewritten(tmp_path, content) -> None:
    records = TuningRecords(tmp_path)
    records.path("k").write_text(content)
    fake = Fake([A, B])
    assert fake.first(records)[0] == TUNED and fake.tunes == 1
    assert records.load("k", 2) == [A, B]


def test_a_record_for_another_number_of_steps_is_not_taken(tmp_path) -> None:
    records = TuningRecords(tmp_path)
    records.save("k", [A, B, B], {})
    assert records.load("k", 2) is None
    fake = Fake([A, B])
    assert fake.first(records)[0] == TUNED and records.load("k", 2) == [A, B]


def test_recorded_configurations_that_fail_to_run_are_tuned_again(tmp_path) -> None:
    records = TuningRecords(tmp_path)
    records.save("k", [B, B], {})
    fake = Fake([A, B], adopt_error=True)
    source, why = fake.first(records)
    assert source == TUNED and fake.tunes == 1
    assert why is not None and "no longer compiles" in why
    assert records.load("k", 2) == [A, B]


def test_a_record_that_cannot_be_written_still_tunes(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    fake = Fake([A])
    source, why = fake.first(TuningRecords(tmp_path / "file" / "tuning"))
    assert source == TUNED and fake.tunes == 1 and why is not None and "not saved" in why


def test_of_processes_starting_together_one_tunes_and_the_others_take_its_record(
        tmp_path) -> None:
    records = TuningRecords(tmp_path)
    fakes = [Fake([A, B], tune_s=0.3) for _ in range(4)]
    start = threading.Barrier(4)

    def first(fake: Fake) -> str:
        start.wait()
        return fake.first(records)[0]

    with ThreadPoolExecutor(4) as pool:
        sources = list(pool.map(first, fakes))
    assert sorted(sources) == [RECORD, RECORD, RECORD, TUNED]
    assert sum(f.tunes for f in fakes) == 1
    assert [f.adopted for f in fakes if f.adopted] == [[[A, B]]] * 3


def test_the_first_call_with_given_configurations_computes_the_plan(plan) -> None:
    """One configuration a step (the tuned ones on a GPU, one tile size in the interpreter):
    the first call with them computes what the reference does, the next calls too, and the
    shape counts as called (not tuned again)."""
    x = torch.randn(1, 9, 16, 32, generator=torch.Generator().manual_seed(0))
    shape = tuple(x.shape)
    if CUDA:
        tuned = TritonExecutor(plan, DEVICE)
        tuned(x.to(DEVICE))
        configs = tuned.configs(shape)
    else:
        configs = [Config(512, 4, 2)] * len(plan.steps)
    executor = TritonExecutor(plan, DEVICE)
    with pytest.raises(ValueError, match="configurations for"):
        executor.first_call_with(x.to(DEVICE), configs[:-1])
    assert not executor.has(shape)
    out = executor.first_call_with(x.to(DEVICE), configs).cpu()
    expected = run_reference(plan, x)
    assert ((out - expected).norm() / expected.norm()).item() < 2e-3
    assert executor.has(shape) and executor.configs(shape) == configs
    assert shape in executor.cold_seconds
    again = executor(x.to(DEVICE)).cpu()
    torch.testing.assert_close(again, out, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_a_second_backend_takes_the_first_ones_record_and_computes_the_same(
        tmp_path, monkeypatch) -> None:
    """On a GPU: triton-fp16 tunes a shape and records it (in ``$TTBALL_CACHE_DIR/tuning``
    when no cache folder is given); a second instance (another process, a lane) with the same
    folder takes the record without tuning, runs the same configurations, and says so in
    ``tuned``; a damaged record is tuned again; ``records=False`` neither reads nor writes."""
    if not CUDA:
        pytest.skip("needs a CUDA GPU")
    from ttball.backends import create

    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    x = torch.randn(2, 9, 72, 128, device=DEVICE)
    shape = tuple(x.shape)
    monkeypatch.setenv("TTBALL_CACHE_DIR", str(tmp_path / "own"))
    unrecorded = create("triton-fp16", model, DEVICE, records=False)
    unrecorded(x)
    assert unrecorded.tuning == {} and not (tmp_path / "own" / "tuning").exists()
    default = create("triton-fp16", model, DEVICE)
    default(x)
    assert default.tuning[shape][0] == TUNED
    assert len(list((tmp_path / "own" / "tuning").glob("*.json"))) == 1
    first = create("triton-fp16", model, DEVICE, cache_dir=tmp_path)
    want = first(x).float().clone()
    assert first.tuning[shape][0] == TUNED
    second = create("triton-fp16", model, DEVICE, cache_dir=tmp_path)
    got = second(x).float()
    assert second.tuning[shape] == (RECORD, None)
    assert second.executor.configs(shape) == first.executor.configs(shape)
    assert second.tuned(shape).startswith("from a tuning record: ")
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    print(f"first call tuned {first.executor.cold_seconds[shape]:.2f} s, "
          f"from the record {second.executor.cold_seconds[shape]:.2f} s")
    (record,) = (tmp_path / "tuning").glob("*.json")
    data = json.loads(record.read_text())
    assert data["driver"], data  # NVML's (580.95.05), else the CUDA driver API's (cuda 13.0)
    print(f"driver {data['driver']}")
    data["configs"][0] = {**data["configs"][0], "block_m": 3}  # no kernel builds for it
    record.write_text(json.dumps(data))
    third = create("triton-fp16", model, DEVICE, cache_dir=tmp_path)
    third(x)
    assert third.tuning[shape][0] == TUNED and "failed" in str(third.tuning[shape][1])
    assert json.loads(record.read_text())["configs"][0]["block_m"] != 3

"""scripts/gpu_candidate_tests.py: the untested candidates whose tests passed, one failing test
(which breaks the tests after it, as a faulting kernel breaks the CUDA context) set aside."""

from __future__ import annotations

from pathlib import Path

from tests.bench.script_env import run_script

FAKE_TESTS = '''
import pytest

BROKEN = []


@pytest.mark.gpu
@pytest.mark.parametrize("cid", {ids!r})
def test_kernel(cid):
    assert not BROKEN, "the context is broken"
    if cid == {wrong!r}:
        BROKEN.append(cid)
        raise AssertionError("wrong results")


@pytest.mark.gpu
@pytest.mark.parametrize("cid", {skipped!r})
def test_skipped(cid):
    pytest.skip("needs another GPU")
'''


def test_names_the_candidates_whose_tests_passed_alone_or_together(tmp_path: Path) -> None:
    ids = ["128-16-6x14-wg1-taps", "64-64-4x64-wg2-tma", "9-64-8x16-wg1-tma", "9-64-4x32-wg1-tma"]
    first, wrong, after, skipped = ids
    tests = tmp_path / "test_fake.py"
    tests.write_text(FAKE_TESTS.format(ids=[first, wrong, after], wrong=wrong,
                                       skipped=[skipped]))
    log = tmp_path / "tests.log"
    done = run_script("gpu_candidate_tests", "--file", str(tests), "-k", "test_",
                      "--log", str(log), "--ids", ",".join(ids))
    # the test after the wrong one failed together and passed alone; the skipped one is not
    # a pass; the wrong one stays out
    assert done.stdout.strip().split(",") == sorted([first, after])
    assert "candidates passed: 2 of" in done.stderr
    assert f"test_kernel[{after}]: alone passed" in log.read_text()
    assert f"test_kernel[{wrong}]: alone failed" in log.read_text()


def test_names_none_when_nothing_ran(tmp_path: Path) -> None:
    tests = tmp_path / "test_fake.py"
    tests.write_text("def test_other():\n    pass\n")
    done = run_script("gpu_candidate_tests", "--file", str(tests), "-k", "nothing_matches",
                      "--log", str(tmp_path / "tests.log"))
    assert done.stdout.strip() == ""
    assert "candidates passed: 0 of" in done.stderr

"""``ttball cache``: lists what a cache folder holds part by part, with the tuning records and
``--backend auto``'s choices, and clears only the parts asked for (never other files)."""

from __future__ import annotations

import json

import pytest

from ttball.cli import main

IDENTITY = {"gpu": "NVIDIA H200", "capability": [9, 0], "sms": 132, "driver": "580.95.05",
            "torch": "2.11", "triton": "3.5", "cuda": "13.0"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder as ttball leaves it, with a file of someone else's beside the parts."""
    from ttball.kernels.records import TuningRecords

    root = tmp_path / "cache"
    monkeypatch.setenv("TTBALL_CACHE_DIR", str(root))
    records = TuningRecords(root / "tuning")
    records.save("a" * 32, [], {"backend": "triton-fp16-direct", "shape": [16, 9, 288, 512],
                                "variant": {"direct": True}, **IDENTITY})
    (root / "tuning" / ("a" * 32 + ".lock")).touch()
    (root / "tuning" / ("b" * 32 + ".json")).write_text("{not json")
    (root / "auto-backend.json").write_text(json.dumps(
        {"cuda|NVIDIA H200|16 cpus|torch 2.11|abc": {"backend": "triton-fp16-direct",
                                                   "date": "2026-12-05T00:00:00", "trials": []}}))
    (root / "kernels").mkdir()
    (root / "kernels" / "direct.so").write_bytes(b"x" * 2000)
    (root / "onnx" / "openvino").mkdir(parents=True)
    (root / "onnx" / "model.onnx").write_bytes(b"y" * 300)
    (root / "onnx" / "openvino" / "blob").write_bytes(b"z" * 10)
    (root / "notes.txt").write_text("mine")
    return root


def test_list_shows_each_part_the_records_and_the_choices(cache, capsys) -> None:
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == str(cache)
    lines = {line.split()[0]: line for line in out.splitlines()[1:5]}
    assert set(lines) == {"auto", "tuning", "kernels", "onnx"}
    assert " 2 files" in lines["tuning"]  # two records (one unreadable), not the lock file
    assert " 2 files" in lines["onnx"] and "310 B" in lines["onnx"]
    assert "2.0 kB" in lines["kernels"]
    assert "cuda|NVIDIA H200|16 cpus|torch 2.11|abc: triton-fp16-direct" in out
    assert ("triton-fp16-direct 16x9x288x512 on NVIDIA H200, driver 580.95.05, torch 2.11, "
            "triton 3.5") in out
    assert f"{'b' * 32}.json: unreadable" in out


def test_list_as_json(cache, capsys) -> None:
    assert main(["cache", "list", "--json", "--dir", str(cache)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dir"] == str(cache)
    assert {p["name"]: p["files"] for p in data["parts"]} == {
        "auto": 1, "tuning": 2, "kernels": 1, "onnx": 2}
    [good] = [r for r in data["tuning_records"] if "error" not in r]
    assert good["shape"] == [16, 9, 288, 512] and good["driver"] == "580.95.05"
    assert [c["backend"] for c in data["auto_choices"].values()] == ["triton-fp16-direct"]


def test_clear_tuning_deletes_the_records_and_keeps_the_rest(cache, capsys) -> None:
    assert main(["cache", "clear", "tuning"]) == 0
    assert "removed tuning: 2 files" in capsys.readouterr().out
    assert sorted(p.name for p in (cache / "tuning").iterdir()) == ["a" * 32 + ".lock"]
    assert (cache / "auto-backend.json").exists() and (cache / "kernels" / "direct.so").exists()
    assert main(["cache", "clear", "tuning"]) == 0  # again: nothing there
    assert "nothing to clear" in capsys.readouterr().out


def test_clear_all_deletes_every_part_and_nothing_else(cache, capsys) -> None:
    assert main(["cache", "clear", "all", "--json"]) == 0
    removed = json.loads(capsys.readouterr().out)["removed"]
    assert {p["name"] for p in removed} == {"auto", "tuning", "kernels", "onnx"}
    assert sorted(p.name for p in cache.rglob("*")) == ["a" * 32 + ".lock", "notes.txt", "tuning"]


def test_a_compile_cache_folder_lists_its_own_parts(tmp_path, capsys) -> None:
    from ttball.cachedir import MARKER, use_compile_cache

    folder = use_compile_cache(tmp_path / "compiled")  # as serve/track --compile-cache do
    (folder / "inductor" / "fx").mkdir(parents=True)
    (folder / "inductor" / "fx" / "graph").write_bytes(b"g" * 5)
    (folder / "megacache.bin").write_bytes(b"m" * 7)
    assert main(["cache", "--dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "inductor" in out and "megacache" in out and "tuning" not in out
    assert main(["cache", "clear", "megacache", "inductor", "--dir", str(folder)]) == 0
    assert [p.name for p in folder.iterdir()] == [MARKER]


def test_clear_refuses_a_folder_that_is_not_a_ttball_cache(tmp_path, capsys) -> None:
    """A project's own onnx/ and kernels/ share names with cache parts: `clear all --dir` of
    such a folder deleted them (exit 0)."""
    project = tmp_path / "project"
    for name in ("onnx", "kernels", "src"):
        (project / name).mkdir(parents=True)
        (project / name / "keep.txt").write_text(name)
    assert main(["cache", "clear", "all", "--dir", str(project)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a ttball cache" in err and "\n" not in err
    assert sorted(p.name for p in project.rglob("keep.txt")) == ["keep.txt"] * 3


def test_a_compile_cache_under_a_file_is_one_line(tmp_path) -> None:
    from ttball.cachedir import use_compile_cache
    from ttball.errors import UserError

    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="--compile-cache .*afile/cc: Not a directory"):
        use_compile_cache(tmp_path / "afile" / "cc")


def test_parts_may_follow_the_options(cache, capsys) -> None:
    """argparse alone took a command's positionals in one run: ``clear --dir X tuning`` was an
    "unrecognized arguments" error; an unknown option still is one."""
    assert main(["cache", "clear", "--dir", str(cache), "tuning", "--json", "kernels"]) == 0
    removed = json.loads(capsys.readouterr().out)["removed"]
    assert {p["name"] for p in removed} == {"tuning", "kernels"}
    assert (cache / "auto-backend.json").exists()
    with pytest.raises(SystemExit) as exit_:
        main(["cache", "clear", "--dir", str(cache), "auto", "--bogus"])
    assert exit_.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert (cache / "auto-backend.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["cache", "clear"], "clear needs the parts to delete"),
    (["cache", "clear", "tuning", "bogus"], "unknown cache part 'bogus'"),
    (["cache", "list", "tuning"], "list takes no parts"),
])
def test_bad_requests_are_one_line_errors_that_delete_nothing(cache, capsys, argv,
                                                               message) -> None:
    before = sorted(p for p in cache.rglob("*"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert sorted(p for p in cache.rglob("*")) == before


def test_a_dir_that_is_a_file_or_empty(tmp_path, capsys) -> None:
    (tmp_path / "f").write_text("")
    assert main(["cache", "--dir", str(tmp_path / "f")]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert main(["cache", "--dir", str(tmp_path / "none")]) == 2  # a typo, not "empty"
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "fresh").mkdir()
    assert main(["cache", "--dir", str(tmp_path / "fresh")]) == 0
    assert "empty" in capsys.readouterr().out

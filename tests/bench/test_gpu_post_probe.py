"""scripts/gpu_post_probe.py on the CPU: the pipeline's stages a push, per depth, into JSON."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.script_env import run_script


def test_the_probe_reports_each_stage_a_push_for_each_depth(tmp_path: Path) -> None:
    out = tmp_path / "post.json"
    done = run_script("gpu_post_probe", "--out", str(out), "--device", "cpu", "--busy-ms", "0",
                      "--depths", "1,2", "--pushes", "2", "--sessions", "2")
    result = json.loads(out.read_text())
    assert [(r["busy_ms"], r["depth"]) for r in result["runs"]] == [(0.0, 1), (0.0, 2)]
    for run in result["runs"]:
        stages = run["stages"]
        # postprocess holds its parts; on the CPU there is no event to wait for
        assert stages["postprocess"]["wall_ms"] > 0 and stages["post_wait"]["wall_ms"] == 0
        assert stages["post_launch"]["wall_ms"] + stages["post_read"]["wall_ms"] \
            <= stages["postprocess"]["wall_ms"] + 1e-6
        assert run["frames_per_s"] > 0 and run["push_ms"] >= stages["decode"]["wall_ms"]
    assert result["ops"] == {"0.0": {}}  # the CUDA calls alone: only on a GPU
    assert "busy 0 ms depth 2: push" in done.stdout

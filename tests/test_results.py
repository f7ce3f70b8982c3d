"""ttball.results: the JSON writer every command's report goes through."""

from __future__ import annotations

import json
import math

import numpy as np

from ttball.results import write_json


def _strict(text: str) -> object:
    def refuse(name: str) -> float:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_write_json_writes_nan_and_infinities_as_null(tmp_path) -> None:
    """A report with NaN (a latency of no rows, a diverged loss) was written as `NaN`, which
    strict JSON readers (browsers' JSON.parse, jq) refuse."""
    payload = {"p99_ms": math.nan, "rows": [1.5, math.inf, {"loss": -math.inf}],
               "pair": (np.float64("nan"), 2), "name": "x", "n": 3, "ok": True, "none": None}
    path = tmp_path / "report.json"
    write_json(path, payload)
    assert _strict(path.read_text()) == {"p99_ms": None, "rows": [1.5, None, {"loss": None}],
                                         "pair": [None, 2], "name": "x", "n": 3, "ok": True,
                                         "none": None}
    assert payload["p99_ms"] != payload["p99_ms"]  # the caller's payload is left as it was

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


def test_a_file_written_again_keeps_its_permissions(tmp_path) -> None:
    """The new file is renamed over the old one: it took the umask's mode (a private 0600
    file came back 0644)."""
    import os
    import stat

    path = tmp_path / "report.json"
    write_json(path, {"a": 1})
    os.chmod(path, 0o600)
    write_json(path, {"a": 2})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"a": 2}


def test_a_symlink_is_written_through_not_replaced(tmp_path) -> None:
    """The rename replaced the link itself with a file and left its target as it was."""
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json(link, {"a": 1})
    assert link.is_symlink()
    assert json.loads(target.read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_device_or_pipe_is_written_into_not_replaced(tmp_path) -> None:
    """`--json /dev/null` as root renamed a regular file over the device node."""
    import os
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_json(fifo, {"a": 1})
    reader.join(timeout=10)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert json.loads(got[0]) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_device_that_refuses_the_bytes_is_a_user_error(tmp_path) -> None:
    """A full device (ENOSPC on every write) is the user's one-line error. A node of its own
    (as /dev/full is made), never the system's: the old code renamed a file over it."""
    import os
    import stat

    import pytest

    from ttball.errors import UserError

    full = tmp_path / "full"
    try:
        os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except (PermissionError, AttributeError):
        pytest.skip("making a device node needs root")
    with pytest.raises(UserError, match="full: No space left"):
        write_json(full, {"a": 1})
    assert stat.S_ISCHR(full.stat().st_mode)

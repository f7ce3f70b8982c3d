"""ttball.filelock: one holder at a time, across threads as across processes."""

from __future__ import annotations

import threading
import time

from ttball.filelock import exclusive


def test_a_free_lock_is_taken_at_once_and_its_folder_made(tmp_path) -> None:
    path = tmp_path / "new" / "x.lock"
    with exclusive(path) as waited:
        assert waited is not None and waited < 0.5
    assert path.is_file()


def test_a_second_holder_waits_until_the_first_lets_go(tmp_path) -> None:
    path, order = tmp_path / "x.lock", []
    first_in = threading.Event()

    def second() -> None:
        first_in.wait()
        with exclusive(path) as waited:
            order.append(("second", waited))

    thread = threading.Thread(target=second)
    thread.start()
    with exclusive(path):
        first_in.set()
        time.sleep(0.3)
        order.append(("first", None))
    thread.join()
    assert [who for who, _ in order] == ["first", "second"]
    assert order[1][1] is not None and order[1][1] >= 0.2


def test_a_holder_kept_past_the_timeout_yields_none_and_the_block_still_runs(tmp_path) -> None:
    path = tmp_path / "x.lock"
    with exclusive(path):
        start = time.monotonic()
        with exclusive(path, timeout_s=0.2) as waited:
            assert waited is None
        assert 0.15 <= time.monotonic() - start < 2


def test_a_folder_that_cannot_be_made_yields_none(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    with exclusive(tmp_path / "file" / "x.lock") as waited:
        assert waited is None

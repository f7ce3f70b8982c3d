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


def test_the_first_runs_alone_and_the_others_together_after_it(tmp_path) -> None:
    """first_alone: of three threads, one runs the block holding the lock (the others wait for
    it), writes the marker, and the two others then run theirs at once."""
    from ttball.filelock import first_alone

    marker, lock = tmp_path / "warm" / "done", threading.Lock()
    running, overlap, alone = [0], [0], []

    def worker() -> None:
        with first_alone(marker) as first:
            with lock:
                running[0] += 1
                overlap[0] = max(overlap[0], running[0])
            alone.append(first)
            time.sleep(0.3)
            with lock:
                running[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(alone) == [False, False, True] and alone[0] is True
    assert marker.is_file() and overlap[0] == 2  # the first alone, then the two together
    with first_alone(marker) as first:  # a later start: the marker is there
        assert first is False


def test_a_block_that_fails_alone_leaves_no_marker(tmp_path) -> None:
    from ttball.filelock import first_alone

    marker = tmp_path / "done"
    try:
        with first_alone(marker):
            raise RuntimeError("compile failed")
    except RuntimeError:
        pass
    assert not marker.exists()
    with first_alone(marker) as first:
        assert first is True

"""One process (or thread) at a time through work that several would otherwise all do at once.

Eight ``serve --ray`` replicas started together on one GPU each built the CUDA kernels' library
with nvcc and each tuned every batch size, on 16 cores and one GPU: a cold start outlasted
~240 s, while priming the caches in one process first took 86 s and the replicas were then
ready in 70-79 s (``docs/benchmarks/h200-2026-12-04f/``). With :func:`exclusive` around such
work the first process does it and the others wait, then find its result on disk;
:func:`first_alone` does the same for work each process must still run itself (a warm-up
that compiles into shared caches), the first one alone.

An ``flock`` on a file beside the result: the kernel drops it when its holder exits, so a
process that dies mid-way leaves no stale lock; two threads of one process that open the file
separately exclude each other too. Linux and macOS (``fcntl``).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POLL_S = 0.05


@contextmanager
def exclusive(path: str | os.PathLike[str], timeout_s: float = 900.0) -> Iterator[float | None]:
    """Hold an exclusive lock on ``path`` (created, with its folder, if missing) for the block.
    Yields the seconds waited for it, or ``None`` if another holder kept it past ``timeout_s``:
    the block then runs without it (what it guards must stay correct unlocked, only slower,
    as writing a result atomically is). A folder that cannot be written also yields ``None``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield None
        return
    try:
        yield _acquire(fd, timeout_s)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _acquire(fd: int, timeout_s: float) -> float | None:
    start = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return time.monotonic() - start
        except BlockingIOError:
            if time.monotonic() - start >= timeout_s:
                return None
            time.sleep(POLL_S)


@contextmanager
def first_alone(marker: str | os.PathLike[str], timeout_s: float = 300.0) -> Iterator[bool]:
    """Run the block alone if no process has run it to the end before (``marker`` missing),
    else beside the others: of processes that start the same compiles together, the first
    compiles into the shared caches while the others wait, then each runs the block with
    those caches warm. Yields whether this one ran alone (the marker is written when it
    finishes). The lock is ``marker`` + ``.lock``; a holder kept past ``timeout_s``, or a
    folder that cannot be written, lets the block run unlocked (what it does must be correct
    either way, only slower)."""
    marker = Path(marker)
    with exclusive(marker.with_name(marker.name + ".lock"), timeout_s) as waited:
        if waited is not None and not marker.exists():
            yield True
            try:
                marker.touch()
            except OSError:
                pass
            return
    yield False

"""What a thread's loop of short calls that let the interpreter lock go costs when another
thread of the process is busy in Python (the "convoy": each call gives the lock up, and taking
it back waits for the busy thread to give it up in turn, up to the switch interval).

The loops are the lane's: writing ``--frames`` JPEG-sized blobs into a shared inbox through
numpy slice assignments (numpy lets the lock go for a copy that large) or through a
``memoryview`` (one memcpy, the lock held), and ``--frames`` ``clone()`` calls of small
tensors (every torch op lets the lock go). Each is timed alone, then beside a thread spinning
in Python, at each ``--switch-ms``::

    python scripts/gil_convoy.py [--switch-ms 5 0.5] [--frames 22] [--blob-kb 150] [--reps 30] [--out convoy.json]

Prints one line a loop and condition (median and max ms of ``--reps`` runs) and writes them as
JSON with ``--out``. The worker's lanes, event loop and decode pool share one lock the same
way (``docs/benchmarks/LOG.md``, thirty-second session).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import torch


def loops(frames: int, blob_bytes: int
          ) -> tuple[dict[str, Callable[[], None]], np.ndarray, list[bytes]]:
    """The three loops, over ``frames`` items each, and the inbox and blobs the copies use."""
    rng = np.random.default_rng(0)
    blobs = [rng.integers(0, 255, blob_bytes, dtype=np.uint8).tobytes() for _ in range(frames)]
    inbox = np.zeros(frames * blob_bytes, np.uint8)
    view = memoryview(inbox).cast("B")
    small = torch.zeros(frames, 3 * 720 * 1280 // 100, dtype=torch.uint8)

    def numpy_copies() -> None:
        offset = 0
        for blob in blobs:
            inbox[offset:offset + len(blob)] = np.frombuffer(blob, np.uint8)
            offset += len(blob)

    def memoryview_copies() -> None:
        offset = 0
        for blob in blobs:
            view[offset:offset + len(blob)] = blob
            offset += len(blob)

    def torch_clones() -> None:
        for row in small:
            row.clone()

    return ({"numpy_copies": numpy_copies, "memoryview_copies": memoryview_copies,
             "torch_clones": torch_clones}, inbox, blobs)


def measure(switch_ms: float, frames: int, blob_bytes: int, reps: int) -> list[dict[str, object]]:
    """Each loop's median and max ms, alone and beside a busy thread, at ``switch_ms``."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(switch_ms / 1e3)
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            for i in range(1000):
                x += i

    rows: list[dict[str, object]] = []
    spinner = threading.Thread(target=spin, daemon=True)
    try:
        for busy in (False, True):
            if busy:
                spinner.start()
                time.sleep(0.05)
            for name, loop in loops(frames, blob_bytes)[0].items():
                times = []
                for _ in range(reps):
                    start = time.perf_counter()
                    loop()
                    times.append((time.perf_counter() - start) * 1e3)
                times.sort()
                rows.append({"switch_ms": switch_ms, "busy_thread": busy, "loop": name,
                             "frames": frames, "p50_ms": round(times[len(times) // 2], 3),
                             "max_ms": round(times[-1], 3)})
    finally:
        stop.set()
        if spinner.is_alive():
            spinner.join()
        sys.setswitchinterval(previous)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--switch-ms", type=float, nargs="+", default=[5.0, 0.5])
    p.add_argument("--frames", type=int, default=22)
    p.add_argument("--blob-kb", type=int, default=150)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.frames < 1 or args.blob_kb < 1 or args.reps < 1:
        p.error("--frames, --blob-kb and --reps must be >= 1")
    if any(not 0.01 <= ms <= 100 for ms in args.switch_ms):
        p.error("--switch-ms must be between 0.01 and 100")
    rows = []
    for ms in args.switch_ms:
        for row in measure(ms, args.frames, args.blob_kb * 1000, args.reps):
            rows.append(row)
            print(f"switch {row['switch_ms']:>4g} ms, {'beside a busy thread' if row['busy_thread'] else 'alone':21} "
                  f"{row['loop']:18} p50 {row['p50_ms']:8.2f} ms  max {row['max_ms']:8.2f} ms")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"torch": torch.__version__, "python": sys.version.split()[0],
                       "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where each thread of one process spends its wall time, from ``py-spy record --idle --threads
-f raw`` (``PYSPY=idle`` in ``scripts/gpu_ray_loadtest.sh``: ``stacks-R-S.txt`` of one replica,
``stacks-child-R-S.txt`` of one of its decode children).

With ``--idle`` every sample counts, whether the thread ran or waited (for a child's answer,
the device, the interpreter lock, work), so a thread's samples split its wall time. Per thread,
busiest first: its samples, the innermost frames (where it was: a wait shows as the call that
waits) and the innermost ``ttball/`` frames (which of our lines led there)::

    python scripts/stack_report.py OUT/ray/stacks-8-320.txt [--procs OUT/ray/procs-8-320.json]

``--procs``: a ``proc_cpu.py diff --json`` file, for the kernel names of threads py-spy could
not name. Runs where ttball is not installed (the GPU machine's load-test scripts).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ray_loadtest_summary import thread_names  # a script beside this one

PACKAGE = "ttball/"


@dataclass
class Thread:
    """One thread's samples: ``stacks`` maps each stack (outermost frame first) to its count."""

    tid: str
    name: str = ""
    stacks: Counter[tuple[str, ...]] = field(default_factory=Counter)

    @property
    def samples(self) -> int:
        return sum(self.stacks.values())

    def innermost(self) -> Counter[str]:
        """Samples by the stack's innermost frame (``(no Python frame)``: a native-only stack)."""
        out: Counter[str] = Counter()
        for stack, n in self.stacks.items():
            out[stack[-1] if stack else "(no Python frame)"] += n
        return out

    def innermost_package(self, package: str = PACKAGE) -> Counter[str]:
        """Samples by the stack's innermost frame in a file under ``package``."""
        out: Counter[str] = Counter()
        for stack, n in self.stacks.items():
            ours = next((f for f in reversed(stack) if _file(f).startswith(package)), None)
            out[ours or f"(outside {package})"] += n
        return out


def parse(lines: list[str]) -> dict[str, Thread]:
    """py-spy's raw lines (``thread (TID)[: name];frame;...;frame COUNT``) by thread id; a
    line that is not one (a blank, a log line) is skipped."""
    threads: dict[str, Thread] = {}
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit() or not stack.startswith("thread ("):
            continue
        head, *frames = stack.split(";")
        tid = head[len("thread ("):head.find(")")]
        name = head.partition("): ")[2]
        thread = threads.setdefault(tid, Thread(tid))
        thread.name = thread.name or name
        thread.stacks[tuple(frames)] += int(count)
    return threads


def _file(frame: str) -> str:
    """``ttball/x.py`` of ``func (ttball/x.py:12)``."""
    inside = frame[frame.rfind("(") + 1:].rstrip(")")
    return inside.rpartition(":")[0] or inside


def report(threads: dict[str, Thread], names: dict[str, str] | None = None, top: int = 10,
           most: int = 4) -> str:
    """The ``most`` threads with the most samples, each with its ``top`` innermost frames
    and innermost ``ttball/`` frames as % of that thread's samples."""
    names = names or {}
    total = sum(t.samples for t in threads.values())
    out = [f"{len(threads)} threads, {total} samples"]
    for thread in sorted(threads.values(), key=lambda t: -t.samples)[:most]:
        name = thread.name or names.get(thread.tid, "?")
        out.append(f"\nthread {thread.tid} {name}: {thread.samples} samples")
        for title, counts in (("innermost frame", thread.innermost()),
                              (f"innermost {PACKAGE} frame", thread.innermost_package())):
            out.append(f"  {title}:")
            for frame, n in counts.most_common(top):
                out.append(f"    {100 * n / thread.samples:5.1f} %  {frame}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stacks", type=Path, help="py-spy record --idle --threads -f raw output")
    parser.add_argument("--procs", type=Path, help="proc_cpu.py diff --json (thread names)")
    parser.add_argument("--top", type=int, default=10, help="frames shown a list")
    parser.add_argument("--threads", type=int, default=4, help="threads shown, busiest first")
    args = parser.parse_args()
    try:
        threads = parse(args.stacks.read_text().splitlines())
    except OSError as exc:
        parser.error(f"{args.stacks}: {exc.strerror}")
    if not threads:
        parser.error(f"{args.stacks}: no py-spy --threads raw stacks")
    names = thread_names(str(args.procs)) if args.procs else {}
    print(report(threads, names, args.top, args.threads))


if __name__ == "__main__":
    main()

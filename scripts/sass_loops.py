"""Count a CUDA kernel's instructions without a GPU: compile ``ttball/kernels/direct.cu`` (or a
copy with a patch applied) for sm_90a, disassemble it with ``cuobjdump -sass`` (the CUDA
toolkit's, else the one Triton ships) and print, per kernel whose name matches, its
instruction count and each loop (a backward branch) with its length and notable
instructions. The forty-second session found this way that the tap-partials kernel's halo copy
is a loop of 28 instructions a 16-byte chunk (16 chunks a thread a tile: ~450 of the ~1,190
instructions a thread issues a tile, Nsight Compute's count) and its sums 211 an item (the
tile loop's 675 once, plus 15 more chunks and 0.44 more items a thread: 1,188).

    PYTHONPATH=. python scripts/sass_loops.py --kernel taps_kernel [--patch FILE]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTABLE = ("LDGSTS", "LDG", "STG", "LDS", "STS", "HGMMA", "HMMA", "LDSM", "BAR", "SYNCS", "UTMALDG")
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
BRANCH = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?BRA(?:\.\w+)*\s+(?:`\(\.L_x_\d+\)|0x)?([0-9a-f]+)?")


def cuobjdump() -> str:
    """The toolkit's cuobjdump, else Triton's bundled one."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    except ImportError:
        bundled = None
    if bundled is None or not bundled.exists():
        sys.exit("sass_loops.py: no cuobjdump (CUDA toolkit or Triton's)")
    return str(bundled)


def compile_cubin(source: Path, out: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        sys.exit("sass_loops.py: no nvcc on this machine")
    subprocess.run([nvcc, "-cubin", "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a",
                    str(source), "-o", str(out)], check=True, capture_output=True, text=True)


def functions(sass: str) -> dict[str, list[str]]:
    """Each function's SASS lines, by mangled name."""
    out: dict[str, list[str]] = {}
    name = None
    for line in sass.splitlines():
        head = re.match(r"\s*Function : (\S+)", line)
        if head:
            name = head.group(1)
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return out


def summarize(lines: list[str]) -> tuple[int, list[tuple[int, int, int, Counter[str]]]]:
    """The instruction count and the loops: (start, end address, instructions, notable ops)."""
    code = [(int(m.group(1), 16), m.group(2)) for m in map(INSTRUCTION.search, lines) if m]
    loops = []
    for line in lines:
        m = BRANCH.search(line)
        if not m or not m.group(2):
            continue
        at, target = int(m.group(1), 16), int(m.group(2), 16)
        if target <= at:  # backward: a loop from target to this branch
            body = [op for addr, op in code if target <= addr <= at]
            ops = Counter(op.split(".")[0] for op in body)
            loops.append((target, at, len(body),
                          Counter({k: v for k, v in ops.items() if k in NOTABLE})))
    return len(code), loops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernel", default="taps_kernel", help="part of the kernels' names")
    parser.add_argument("--source", default=str(ROOT / "ttball" / "kernels" / "direct.cu"))
    parser.add_argument("--patch", default=None, help="a patch (-p1 from the repo root) to "
                        "apply to a copy of the source first")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "ttball" / "kernels" / "direct.cu"
        source.parent.mkdir(parents=True)
        shutil.copy(args.source, source)
        if args.patch:
            subprocess.run(["patch", "-p1", "-s", "-i", str(Path(args.patch).resolve())],
                           cwd=tmp, check=True)
        cubin = Path(tmp) / "direct.cubin"
        compile_cubin(source, cubin)
        sass = subprocess.run([cuobjdump(), "-sass", str(cubin)], check=True,
                              capture_output=True, text=True).stdout
    chosen = {n: lines for n, lines in functions(sass).items() if args.kernel in n}
    if not chosen:
        sys.exit(f"sass_loops.py: no kernel matches {args.kernel!r}")
    for name, lines in chosen.items():
        total, loops = summarize(lines)
        print(f"{name}: {total} instructions")
        runs: list[list[tuple[int, int, int, Counter[str]]]] = []
        for loop in loops:  # runs of alike loops one after another (a TMA copy a plane) as one
            if runs and (runs[-1][-1][2], runs[-1][-1][3]) == (loop[2], loop[3]):
                runs[-1].append(loop)
            else:
                runs.append([loop])
        for run in runs:
            (start, _, n, ops), end = run[0], run[-1][1]
            notable = ", ".join(f"{op} {k}" for op, k in sorted(ops.items()))
            times = f"{len(run)} loops" if len(run) > 1 else "loop"
            print(f"  {times} {start:#06x}-{end:#06x}: {n} instructions ({notable})")


if __name__ == "__main__":
    main()

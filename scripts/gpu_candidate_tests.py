"""Run the GPU tests of the untested kernel candidates and name those that passed (issue 9).

``ttball.kernels.direct.UNTESTED`` holds the tiles built without a GPU; the tuner offers them
only when ``$TTBALL_DIRECT_NEXT`` names them (``1``: all). One candidate whose kernel is wrong,
or faults and takes the CUDA context of the whole pytest process with it, must not keep the
others from their A/B. So: the tests run once together; each that failed runs again alone in
a process of its own (a test that passes alone had failed after another test broke the
context); a candidate passes when every test named by its id (``candidate_id``, the tests'
parameter ids) passed. The passing ids go to stdout as ``$TTBALL_DIRECT_NEXT``'s list (empty
if none), what happened to stderr.

GPU machine, repo root::

    NEXT=$(python scripts/gpu_candidate_tests.py -k "taps or tma" --log $OUT/tests.log)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

TEST_FILE = "tests/kernels/test_direct.py"
_PARAM = re.compile(r"\[(.+)\]$")


def outcomes(junit: Path) -> dict[str, str]:
    """Each test case of a junit XML file → ``"passed"``, ``"failed"`` or ``"skipped"``."""
    result = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        result[case.get("name", "")] = ("failed" if kinds & {"failure", "error"}
                                        else "skipped" if "skipped" in kinds else "passed")
    return result


def run_pytest(args: list[str], junit: Path, timeout: float, log) -> None:
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-rA",
           f"--junitxml={junit}", *args]
    print("$", " ".join(cmd), file=log, flush=True)
    try:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        print(f"timed out after {timeout:.0f} s", file=log, flush=True)


def passing(untested_ids: list[str], results: dict[str, str]) -> list[str]:
    """The candidates every test of which (by parameter id) passed; at least one ran."""
    by_id: dict[str, list[str]] = {}
    for name, outcome in results.items():
        match = _PARAM.search(name)
        if match:
            by_id.setdefault(match.group(1), []).append(outcome)
    return [cid for cid in untested_ids
            if by_id.get(cid) and all(o == "passed" for o in by_id[cid])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", default="taps or tma", help="pytest -k expression")
    parser.add_argument("--file", default=TEST_FILE, help="the test file")
    parser.add_argument("--log", type=Path, required=True, help="pytest's output goes here")
    parser.add_argument("--timeout", type=float, default=240, help="the run of all, seconds")
    parser.add_argument("--timeout-one", type=float, default=60, help="a test again alone")
    parser.add_argument("--ids", help="the candidates' ids, comma-separated (default: "
                        "ttball.kernels.direct.UNTESTED's)")
    args = parser.parse_args(argv)

    from ttball.kernels.direct import UNTESTED, candidate_id

    untested_ids = sorted(i.strip() for i in args.ids.split(",") if i.strip()) if args.ids \
        else sorted(candidate_id(*key) for key in UNTESTED)
    with open(args.log, "w") as log, tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "all.xml"
        run_pytest([args.file, "-k", args.k], junit, args.timeout, log)
        if junit.exists():
            results = outcomes(junit)
        else:  # the run hung or died: every test of a candidate alone
            print("no results from the run of all: each candidate's tests alone", file=log)
            results = {}
            listed = subprocess.run(
                [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu",
                 "-p", "no:cacheprovider", args.file, "-k", args.k],
                capture_output=True, text=True, check=False).stdout.split()
            for node in listed:
                match = _PARAM.search(node)
                if "::" in node and match and match.group(1) in untested_ids:
                    results[node.split("::", 1)[1]] = "failed"
        again = sorted(name for name, outcome in results.items() if outcome == "failed")
        for name in again:
            one = Path(tmp) / "one.xml"
            one.unlink(missing_ok=True)
            run_pytest([f"{args.file}::{name}"], one, args.timeout_one, log)
            alone = outcomes(one).get(name, "failed") if one.exists() else "failed"
            print(f"{name}: alone {alone}", file=log, flush=True)
            results[name] = alone
    passed = passing(untested_ids, results)
    failed = sorted(name for name, outcome in results.items() if outcome == "failed")
    counts = {o: sum(v == o for v in results.values()) for o in ("passed", "failed", "skipped")}
    print(f"tests: {counts}; failed: {', '.join(failed) or 'none'}", file=sys.stderr)
    print(f"candidates passed: {len(passed)} of {len(untested_ids)}: "
          f"{', '.join(passed) or 'none'}", file=sys.stderr)
    print(",".join(passed))
    return 0


if __name__ == "__main__":
    sys.exit(main())

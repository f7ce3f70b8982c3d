"""``ttball cache [list|clear PART...]``: what ttball keeps once per machine (the CUDA kernels'
library, tuning records, ``--backend auto``'s choice, exported ONNX files; with ``--dir`` a
``serve --compile-cache`` folder), and deleting parts of it so the next start builds, tunes or
chooses again (after a driver or GPU change, say)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ttball.errors import UserError

ACTIONS = ("list", "clear")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ttball.cachedir import PARTS

    p.add_argument("action", nargs="?", choices=ACTIONS, default="list",
                   help="list (default) or clear")
    p.add_argument("parts", nargs="*", metavar="PART",
                   help=f"with clear: {', '.join(PARTS)} or all")
    p.add_argument("--dir", type=Path, metavar="DIR",
                   help="the folder (default $TTBALL_CACHE_DIR, else ~/.cache/ttball); a serve "
                   "--compile-cache folder holds tuning, inductor, triton, megacache and onnx")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _size(n: float) -> str:
    unit = "B"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            break
        n /= 1000
    return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"


def run(args: argparse.Namespace) -> int:
    from ttball import cachedir

    root = (args.dir if args.dir is not None else cachedir.cache_dir()).expanduser()
    if root.exists() and not root.is_dir():
        raise UserError(f"--dir {root}: not a folder")
    if args.dir is not None and not root.exists():  # a typo, most likely: not "empty"
        raise UserError(f"--dir {root}: no such folder")
    if args.action == "list":
        if args.parts:
            raise UserError("list takes no parts (did you mean: ttball cache clear "
                            f"{' '.join(args.parts)}?)")
        return _list(root, args.json)
    if not args.parts:
        raise UserError(f"clear needs the parts to delete: {', '.join(cachedir.PARTS)} or all")
    try:
        removed = cachedir.clear(root, args.parts)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"cannot delete in {root}: {exc.strerror or exc}"
                        + (f": {exc.filename}" if exc.filename else "")) from None
    if args.json:
        print(json.dumps({"dir": str(root), "removed": [p.as_dict() for p in removed]}, indent=1))
        return 0
    for part in removed:
        print(f"removed {part.name}: {part.files} files, {_size(part.bytes)} ({part.path})")
    if not removed:
        print(f"nothing to clear in {root}")
    return 0


def _list(root: Path, as_json: bool) -> int:
    from ttball import cachedir

    parts = cachedir.inventory(root)
    records = cachedir.tuning_records(root)
    choices = cachedir.auto_choices(root)
    if as_json:
        print(json.dumps({"dir": str(root), "parts": [p.as_dict() for p in parts],
                          "tuning_records": records, "auto_choices": choices}, indent=1))
        return 0
    if not parts:
        print(f"{root}: empty (nothing built, tuned or chosen here yet)")
        return 0
    print(root)
    width = max(len(p.name) for p in parts)
    for p in parts:
        print(f"  {p.name:<{width}}  {p.files:>6} files  {_size(p.bytes):>9}  {p.about}")
    if choices:
        print("--backend auto's choices:")
        for key, c in choices.items():
            print(f"  {key}: {c['backend']} ({c['date']})")
    if records:
        print("tuning records:")
        for r in records:
            if "error" in r:
                print(f"  {r['file']}: unreadable ({r['error']})")
                continue
            shape = "x".join(str(n) for n in r["shape"] or [])
            print(f"  {r['backend']} {shape} on {r['gpu']}, driver {r['driver']}, torch "
                  f"{r['torch']}, triton {r['triton']} ({r['written']})")
    return 0

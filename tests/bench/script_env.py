"""Loading a file of ``scripts/`` (not a package) as a module, for the tests beside this one."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(name: str) -> ModuleType:
    """``scripts/NAME.py`` executed as module ``NAME`` (registered in ``sys.modules``, so its
    dataclasses and pickles resolve), with ``scripts/`` on the path as when the script runs
    (its imports of the scripts beside it)."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.append(str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``scripts/NAME.py ARGS`` in a subprocess from the repository's root, with only the
    repository on its path (plus ``env``); raises if it fails."""
    return subprocess.run([sys.executable, str(ROOT / "scripts" / f"{name}.py"), *args],
                          capture_output=True, text=True, timeout=300, check=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **env})

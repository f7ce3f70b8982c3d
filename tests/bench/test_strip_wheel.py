"""scripts/strip_wheel.py: a wheel's shared objects stripped, its RECORD rewritten to match,
everything else byte for byte."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.bench.script_env import load_script

ROOT = Path(__file__).resolve().parents[2]
strip_wheel = load_script("strip_wheel")


def _shared_object() -> bytes:
    """A real ELF shared object with a symbol table: Python's own extension modules."""
    import _json

    so = getattr(_json, "__file__", None)
    if so is None or not shutil.which("strip"):
        pytest.skip("needs an extension module file and binutils' strip")
    return Path(so).read_bytes()


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_elf_members_are_stripped_and_the_record_matches(tmp_path: Path) -> None:
    so = _shared_object()
    py = b"print('hello')\n"
    wheel = tmp_path / "in" / "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    wheel.parent.mkdir()
    record = (f"pkg/__init__.py,{_hash(py)},{len(py)}\npkg/ext.so,{_hash(so)},{len(so)}\n"
              "pkg-1.0.dist-info/RECORD,,\n")
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/__init__.py", py)
        info = zipfile.ZipInfo("pkg/ext.so")
        info.external_attr = 0o755 << 16
        z.writestr(info, so)
        z.writestr("pkg-1.0.dist-info/RECORD", record)
    target, before, after = strip_wheel.strip_wheel(wheel, tmp_path / "out")
    assert target.name == wheel.name and before == len(so) and 0 < after <= before
    with zipfile.ZipFile(target) as z:
        stripped = z.read("pkg/ext.so")
        assert stripped[:4] == b"\x7fELF" and len(stripped) == after
        assert z.read("pkg/__init__.py") == py
        assert z.getinfo("pkg/ext.so").external_attr >> 16 == 0o755
        rows = dict(line.split(",", 1) for line in z.read("pkg-1.0.dist-info/RECORD").decode().splitlines())
    assert rows["pkg/ext.so"] == f"{_hash(stripped)},{len(stripped)}"
    assert rows["pkg/__init__.py"] == f"{_hash(py)},{len(py)}" and rows["pkg-1.0.dist-info/RECORD"] == ","


def test_a_wheel_without_a_record_is_one_line_on_the_command_line(tmp_path: Path) -> None:
    wheel = tmp_path / "bad-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("bad/__init__.py", "")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "strip_wheel.py"), str(wheel),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "expected one .dist-info/RECORD, found 0" in done.stderr

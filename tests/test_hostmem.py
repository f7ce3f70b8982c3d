from pathlib import Path

import pytest

from ttball import hostmem


def test_available_memory_reads_memavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n")
    monkeypatch.setattr(hostmem, "MEMINFO", meminfo)
    assert hostmem.available_memory() == 2048 * 1024


@pytest.mark.parametrize("text", [None, "MemTotal: 1 kB\n", "MemAvailable: lots kB\n", "MemAvailable:\n"])
def test_available_memory_is_none_where_the_kernel_does_not_say(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | None) -> None:
    meminfo = tmp_path / "meminfo"
    if text is not None:
        meminfo.write_text(text)
    monkeypatch.setattr(hostmem, "MEMINFO", meminfo)
    assert hostmem.available_memory() is None


@pytest.mark.parametrize("n, text", [(0, "0.0 B"), (1023, "1023.0 B"), (1536, "1.5 KiB"),
                                     (5 * 2**20, "5.0 MiB"), (3 * 2**30, "3.0 GiB"),
                                     (2**41, "2.0 TiB")])
def test_format_bytes(n: int, text: str) -> None:
    assert hostmem.format_bytes(n) == text

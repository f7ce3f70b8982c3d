"""Kernel names for threads and processes, so per-thread CPU (``top -H``,
``scripts/proc_cpu.py``) says which one is busy."""

from __future__ import annotations

import sys


def name_os_thread(name: str) -> bool:
    """Set the calling thread's kernel name (``/proc/.../task/TID/comm``: ``tt-backend-1_0``
    for lane 1's thread; a process's main thread names the process, ``tt-decoder`` for a
    decode child) to ``name``'s first 15 bytes, all Linux keeps; False where that fails or
    the platform has no prctl. Threads started later by that thread inherit the name."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(15, name.encode()[:15], 0, 0, 0) == 0  # PR_SET_NAME
    except (OSError, AttributeError):
        return False

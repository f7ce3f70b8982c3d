"""The chain's first compile, with an empty and with a warm on-disk cache, each in a fresh
process (a process that compiled once would reuse its in-memory result instead)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

import ttball
from ttball.errors import BackendUnavailable
from ttball.lab.fusion.experiments import chain_input, compile_chain
from ttball.lab.fusion.timing import sync


@dataclass(frozen=True)
class CompileCacheResult:
    """Seconds of the first call of a freshly compiled chain (trace, generate, build, run once)
    in a fresh process whose TORCHINDUCTOR_CACHE_DIR starts empty (cold), then in a second
    fresh process on the same directory (warm). ``*_files_before``: files in it before each."""

    cold_s: float
    warm_s: float
    cold_files_before: int
    warm_files_before: int


def first_compile_seconds(numel: int, device: torch.device, threads: int) -> float:
    """Run in a fresh process: from ``torch.compile`` to the first result, synchronized."""
    torch.set_num_threads(threads)
    with torch.inference_mode():
        x = chain_input(numel, device)
        fn = compile_chain()
        sync(device)
        start = time.perf_counter()
        fn(x)
        sync(device)
        return time.perf_counter() - start


def probe_main(argv: Sequence[str]) -> None:
    """Entry of the child process: ``numel device threads`` in, one JSON line out."""
    numel, device, threads = int(argv[0]), torch.device(argv[1]), int(argv[2])
    print(json.dumps({"first_call_s": first_compile_seconds(numel, device, threads)}))


def compile_cache_experiment(
    numel: int, device: torch.device, threads: int, timeout_s: float = 600
) -> CompileCacheResult:
    with tempfile.TemporaryDirectory(prefix="ttball-inductor-") as cache_dir:
        cold_before = _count_files(cache_dir)
        cold = _probe(cache_dir, numel, device, threads, timeout_s)
        warm_before = _count_files(cache_dir)
        warm = _probe(cache_dir, numel, device, threads, timeout_s)
    return CompileCacheResult(cold, warm, cold_before, warm_before)


def _count_files(root: str) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def _probe(cache_dir: str, numel: int, device: torch.device, threads: int, timeout_s: float) -> float:
    package_root = str(Path(ttball.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": cache_dir,
        "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton"),
        "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
    }
    code = ("import sys; from ttball.lab.fusion.compile_cache import probe_main; "
            "probe_main(sys.argv[1:])")
    cmd = [sys.executable, "-c", code, str(numel), str(device), str(threads)]
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise BackendUnavailable(f"torch.compile took over {timeout_s:.0f} s in a fresh process")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BackendUnavailable(f"torch.compile failed in a fresh process: {last}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["first_call_s"])

"""scripts/gpu_e2e.py's feed on the CPU with a tiny input: the sessions' window phases
staggered (steady backend calls a push) or aligned (bursts)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def e2e():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_e2e
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return gpu_e2e


@pytest.fixture(scope="module")
def backend_and_config(e2e):
    from ttball.backends import create

    model = e2e.load_weights(None, "72x128")
    return create("eager-fp32", model, torch.device("cpu")), model.config


def _windows_per_push(e2e, backend, config, stagger: bool, sessions: int = 12, batch: int = 4,
                      pushes: int = 12) -> tuple[list[int], int]:
    blobs, _ = e2e.make_frames(4, 90)
    device = torch.device("cpu")
    pipeline, per_push = e2e.open_pipeline(
        backend, config, sessions, batch, 3, e2e.JpegDecoder(device), e2e.StageTimer(device),
        blobs=blobs if stagger else None)
    calls: list[tuple[int, int]] = []
    pipeline.on_batch = lambda windows, size: calls.append((windows, size))
    counts = []
    for p in range(pushes):
        before = len(calls)
        pipeline.push(e2e.feed(blobs, sessions, per_push, p * per_push))
        counts.append(sum(w for w, _ in calls[before:]))
    return counts, per_push


def test_staggered_phases_give_about_a_batch_of_windows_every_push(e2e, backend_and_config) -> None:
    counts, per_push = _windows_per_push(e2e, *backend_and_config, stagger=True)
    assert per_push == 12  # 4 windows of 3 frames
    steady = counts[3:]
    assert all(3 <= c <= 5 for c in steady), counts
    assert sum(steady) == pytest.approx(4 * len(steady), abs=2)


def test_aligned_phases_come_in_bursts(e2e, backend_and_config) -> None:
    counts, _ = _windows_per_push(e2e, *backend_and_config, stagger=False)
    steady = counts[3:]
    assert 0 in steady and max(steady) >= 8, counts  # every session's window on one push
    assert sum(steady) == pytest.approx(4 * len(steady), abs=12)

"""A fake backend for the worker's tests (imported by test_app.py and test_device_pipeline.py)."""

from __future__ import annotations

import threading

import torch

from ttball.backends import BackendBase


class GatedBackend(BackendBase):
    """Zero logits. ``warm_gate`` holds warm-up, ``run_gate`` holds every batch."""

    name = "gated"

    def __init__(self, warm_gate: threading.Event | None = None,
                 run_gate: threading.Event | None = None) -> None:
        super().__init__(torch.device("cpu"))
        self.warm_gate, self.run_gate = warm_gate, run_gate
        self.sizes: list[int] = []

    def warmup(self, batch_sizes, height, width):
        if self.warm_gate is not None:
            assert self.warm_gate.wait(30)
        return super().warmup(batch_sizes, height, width)

    def run(self, batch):
        self.sizes.append(batch.shape[0])
        if self.run_gate is not None:
            assert self.run_gate.wait(30)
        return torch.zeros(batch.shape[0], 3, *batch.shape[2:])

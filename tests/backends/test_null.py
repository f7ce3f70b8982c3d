"""The ``null`` diagnostic backend: constant logits, no ball, never offered where a network is
meant."""

from __future__ import annotations

import torch

from ttball.backends import auto, base
from ttball.backends.null import NULL_LOGIT
from ttball.bench.runner import select_variants
from ttball.postprocess import DEFAULT_THRESHOLD


def _model() -> torch.nn.Module:
    return torch.nn.Module()  # the null backend never runs it


def test_null_returns_constant_logits_of_the_input_shape() -> None:
    backend = base.create("null", _model(), "cpu")
    first = backend(torch.randn(2, 9, 72, 128))
    assert first.shape == (2, 3, 72, 128) and first.dtype == torch.float32
    assert torch.all(first == NULL_LOGIT)
    other = backend(torch.randn(3, 9, 36, 64))
    assert other.shape == (3, 3, 36, 64)
    again = backend(torch.zeros(2, 9, 72, 128))
    assert again.data_ptr() == first.data_ptr()  # no work per call: one buffer per shape
    assert torch.all(first == NULL_LOGIT)  # an earlier result is never overwritten
    assert backend.warmed == {2, 3}


def test_null_finds_no_ball() -> None:
    heatmap = torch.sigmoid(base.create("null", _model(), "cpu")(torch.zeros(1, 9, 72, 128)))
    assert float(heatmap.max()) < 1e-6 < DEFAULT_THRESHOLD  # (verify fails it: test_verify.py)


def test_null_is_never_chosen_unless_named() -> None:
    assert "null" in base.names() and "diagnostic" in base.spec("null").tags
    assert all("null" not in names for names in auto.CANDIDATES.values())
    cpu = torch.device("cpu")
    assert "null" not in select_variants(None, cpu)
    assert "null" not in select_variants(["*"], cpu)
    assert select_variants(["null"], cpu) == ["null"]

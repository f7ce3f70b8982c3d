"""ttball.kernels.copies: device copies as kernels give the same bits as memcpys."""

from __future__ import annotations

import pytest
import torch

from ttball.kernels import copies


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.float16, torch.float32])
def test_a_kernel_copy_has_the_same_bits(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        src = torch.randn(3, 5, 7, generator=gen).to(dtype)
        src[0, 0, :4] = torch.tensor([0.0, -0.0, float("inf"), float("-inf")], dtype=dtype)
        src[1, 1, 1] = torch.finfo(dtype).tiny / 4  # a subnormal
    else:
        src = torch.randint(0, 255, (3, 5, 7), generator=gen).to(dtype)
    out = copies.clone(src, kernel=True)
    assert out.dtype == src.dtype and out.is_contiguous()
    assert torch.equal(out.view(torch.uint8) if dtype.itemsize == 1 else out, src)
    bits = {torch.float16: torch.int16, torch.float32: torch.int32}.get(dtype)
    if bits is not None:  # -0.0 and the subnormal too
        assert torch.equal(out.view(bits), src.view(bits))


def test_clone_of_a_strided_view_is_contiguous_and_equal() -> None:
    src = torch.arange(60, dtype=torch.float32).view(3, 4, 5)[:, ::2].transpose(1, 2)
    for kernel in (False, True):
        out = copies.clone(src, kernel=kernel)
        assert out.is_contiguous() and torch.equal(out, src)


def test_the_environment_turns_kernel_copies_on_only_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(copies.ENV, raising=False)
    assert not copies.kernel_copies()
    monkeypatch.setenv(copies.ENV, "1")
    assert copies.kernel_copies()
    src = torch.arange(10, dtype=torch.uint8)
    dst = torch.zeros_like(src)
    assert copies.copy_into(dst, src) is dst and torch.equal(dst, src)  # the CPU: a copy_
    monkeypatch.setenv(copies.ENV, "0")
    assert not copies.kernel_copies()


def test_a_bool_or_mismatched_copy_falls_back_to_copy_() -> None:
    flags = torch.tensor([True, False, True])
    assert torch.equal(copies.clone(flags, kernel=True), flags)
    wide = torch.zeros(3, dtype=torch.float64)
    assert torch.equal(copies.copy_into(wide, torch.tensor([1.0, 2.0, 3.0]), kernel=True),
                       torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kernel_copies_on_cuda_match() -> None:
    src = torch.randn(4, 9, 72, 128, device="cuda")
    assert torch.equal(copies.clone(src, kernel=True), src)
    frames = torch.randint(0, 255, (2, 3, 72, 128), dtype=torch.uint8, device="cuda")
    assert torch.equal(copies.clone(frames, kernel=True), frames)

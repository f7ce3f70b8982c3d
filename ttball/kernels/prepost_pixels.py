"""The frames' pixel work on the device as Triton kernels (``Resizer(..., mode="triton")`` and
:class:`Normalizer`; ``serve --pipeline-resize triton``).

**Resize.** :func:`ttball.kernels.prepost_image._resize_taps` is the reference: a dozen
``int32`` passes over the output eager, one fused kernel under ``torch.compile`` (4.8 µs a
1280×720 frame on an H200, about 7× its bytes: ``docs/benchmarks/h200-2026-12-05``).
:func:`resize` does the same integer arithmetic, so its output is the reference's bit for bit
(and so ``cv2.resize``'s): a program an output row of a frame (its colour planes share the
row's taps) loads its two source rows' taps straight from the frames, in any strides (a decoded
``(3, H, W)`` frame, a permuted ``(H, W, 3)`` one, or frames laid one after another in a buffer
that were never stacked: :func:`runs`), and writes the row once. Its bytes are the taps' source
rows and the output, ~2.6 MB a 1280×720 frame to 512×288: ~0.6 µs at the H200's 4.3 TB/s.

**Normalisation.** :func:`ttball.frames.normalize` is four passes over a window's float32
(``to``, ``div_``, ``sub_``, ``div_``: ~38 MB a 288×512 window read and written). A pixel's
value is one of 256 a channel, so :class:`Normalizer` computes the 9 × 256 of them once with
that very function on the CPU and one kernel looks each pixel up (1.3 MB read, 5.3 MB
written a window): the CPU path's values bit for bit. (On CUDA the eager ``div_(255.0)``
multiplies by the float reciprocal instead, which differs in the last bit for 126 of the 256
values; with this kernel the device path's input is the CPU path's and verify's exactly, for
the same pixels: nvJPEG's decode still differs from cv2's by a few levels.)

Both run in Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1``), where
``tests/kernels/test_prepost_pixels.py`` checks them against the references and ``cv2.resize``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl
from torch import Tensor

if TYPE_CHECKING:
    from ttball.model.config import WeightsConfig


# Strides and the frames' and output's alignment are not specialized on: one compile (the
# warm-up's, Resizer.warm) serves every source size, layout and run of frames, so no live push
# compiles (Triton would compile again for a stride of 1 or a multiple of 16, or a pointer not
# 16-byte aligned: a frame inside a run, an output slice).
@triton.jit(do_not_specialize=["s_n", "s_c", "s_h", "s_w", "C"],
            do_not_specialize_on_alignment=["src_ptr", "out_ptr"])
def _resize_kernel(src_ptr, out_ptr, x_lo_ptr, x_hi_ptr, a_lo_ptr, a_hi_ptr,
                   y_lo_ptr, y_hi_ptr, b_lo_ptr, b_hi_ptr,
                   s_n, s_c, s_h, s_w, C, h, w, BLOCK_W: tl.constexpr):
    row = tl.program_id(0)
    n = tl.program_id(1)  # the frame
    frame = src_ptr + n.to(tl.int64) * s_n
    top_row = frame + tl.load(y_lo_ptr + row).to(tl.int64) * s_h
    bottom_row = frame + tl.load(y_hi_ptr + row).to(tl.int64) * s_h
    b_lo = tl.load(b_lo_ptr + row)
    b_hi = tl.load(b_hi_ptr + row)
    out_row = out_ptr + n.to(tl.int64) * C * h * w + row * w
    for start in range(0, w, BLOCK_W):
        cols = start + tl.arange(0, BLOCK_W)
        inside = cols < w
        x_lo = tl.load(x_lo_ptr + cols, mask=inside, other=0).to(tl.int64) * s_w
        x_hi = tl.load(x_hi_ptr + cols, mask=inside, other=0).to(tl.int64) * s_w
        a_lo = tl.load(a_lo_ptr + cols, mask=inside, other=0)
        a_hi = tl.load(a_hi_ptr + cols, mask=inside, other=0)
        for c in range(C):  # the colour planes share the row's taps
            top = top_row + c * s_c
            bottom = bottom_row + c * s_c
            # the horizontal pass in int32 (exact), >> 4; then the high 16 bits of each product
            # with the row's weight, summed, (t + 2) >> 2: _resize_taps's order, op for op
            upper = (tl.load(top + x_lo, mask=inside, other=0).to(tl.int32) * a_lo
                     + tl.load(top + x_hi, mask=inside, other=0).to(tl.int32) * a_hi) >> 4
            lower = (tl.load(bottom + x_lo, mask=inside, other=0).to(tl.int32) * a_lo
                     + tl.load(bottom + x_hi, mask=inside, other=0).to(tl.int32) * a_hi) >> 4
            value = (((upper * b_lo) >> 16) + ((lower * b_hi) >> 16) + 2) >> 2
            value = tl.minimum(tl.maximum(value, 0), 255)
            tl.store(out_row + c * h * w + cols, value.to(tl.uint8), mask=inside)


def resize(frames: Tensor, x_lo: Tensor, x_hi: Tensor, a_lo: Tensor, a_hi: Tensor,
           y_lo: Tensor, y_hi: Tensor, b_lo: Tensor, b_hi: Tensor, *,
           out: Tensor | None = None) -> Tensor:
    """``(N, C, H, W) uint8`` frames (any strides) and the taps of
    :func:`ttball.kernels.prepost_image._taps` (x: ``(w,)`` indices and weights; y: ``(h,)``,
    weights ``(h,)`` or ``(h, 1)``) → ``(N, C, h, w) uint8``, into ``out`` if given (contiguous,
    that shape), else a new tensor."""
    n, c = frames.shape[:2]
    h, w = y_lo.numel(), x_lo.numel()
    if out is None:
        out = torch.empty(n, c, h, w, dtype=torch.uint8, device=frames.device)
    elif out.shape != (n, c, h, w) or out.dtype != torch.uint8 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous uint8 {(n, c, h, w)}, got {out.dtype} "
                         f"{tuple(out.shape)}")
    if out.numel() == 0:
        return out
    block = min(512, triton.next_power_of_2(w))
    s_n, s_c, s_h, s_w = frames.stride()
    _resize_kernel[(h, n)](
        frames, out, x_lo, x_hi, a_lo, a_hi, y_lo, y_hi, b_lo.reshape(-1), b_hi.reshape(-1),
        s_n, s_c, s_h, s_w, c, h, w, BLOCK_W=block, num_warps=4 if block >= 256 else 2)
    return out


def runs(frames: Sequence[Tensor]) -> list[Tensor]:
    """``frames`` (at least one) as few ``(n, ...)`` views as they allow, in order, without a
    copy: each view a run of frames that lie in one buffer at equal distances with equal shapes
    and strides, as a decode call's frames do (each decode child copies its run out of its slot
    as one tensor and unbinds it: :meth:`ttball.kernels.decode_process._Child._copy_out`). A
    frame repeated at once (a session's repeat) is a distance of 0, a view that reads it
    twice; a frame alone is a run of one."""
    out: list[Tensor] = []
    run = [frames[0]]
    for frame in frames[1:]:
        if _follows(run, frame):
            run.append(frame)
        else:
            out.append(_view(run))
            run = [frame]
    out.append(_view(run))
    return out


def _follows(run: list[Tensor], frame: Tensor) -> bool:
    first = run[0]
    if (frame.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
            or frame.shape != first.shape or frame.stride() != first.stride()
            or frame.dtype != first.dtype or frame.device != first.device):
        return False
    step = run[1].storage_offset() - first.storage_offset() if len(run) > 1 else (
        frame.storage_offset() - first.storage_offset())
    return step >= 0 and frame.storage_offset() == first.storage_offset() + len(run) * step


def _view(run: list[Tensor]) -> Tensor:
    first = run[0]
    step = run[1].storage_offset() - first.storage_offset() if len(run) > 1 else 0
    return first.as_strided((len(run), *first.shape), (step, *first.stride()),
                            first.storage_offset())


@triton.jit
def _normalize_kernel(src_ptr, lut_ptr, out_ptr, plane, C, BLOCK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    index = tl.program_id(1)  # window * C + channel
    offsets = start + tl.arange(0, BLOCK)
    inside = offsets < plane
    at = index.to(tl.int64) * plane + offsets
    value = tl.load(src_ptr + at, mask=inside, other=0).to(tl.int32)
    tl.store(out_ptr + at, tl.load(lut_ptr + (index % C) * 256 + value, mask=inside), mask=inside)


class Normalizer:
    """``(B, 9, h, w) uint8`` windows → the network's float32 input, equal bit for bit to
    :func:`ttball.frames.normalize` on the CPU: each pixel looked up in the 9 × 256 values that
    function gives (one kernel on CUDA or in Triton's interpreter; if it fails, ``error`` says
    why and :meth:`reference`, the same lookup as torch ops, runs)."""

    BLOCK = 1024

    def __init__(self, config: WeightsConfig, device: torch.device | str) -> None:
        from ttball.frames import normalize

        levels = torch.arange(256, dtype=torch.uint8).expand(1, 9, 1, 256).contiguous()
        self.lut = normalize(levels, config).reshape(9 * 256).to(device)
        self.error: str | None = None  # why the kernel failed (the lookup in torch ops runs)

    def __call__(self, windows: Tensor) -> Tensor:
        if windows.dtype != torch.uint8 or windows.dim() != 4 or windows.shape[1] != 9:
            raise ValueError(f"expected (B, 9, h, w) uint8 windows, got {windows.dtype} "
                             f"{tuple(windows.shape)}")
        if self.error is None:
            try:
                return self._kernel(windows.contiguous())
            except Exception as exc:  # noqa: BLE001  (kept in error; the lookup is exact too)
                self.error = f"{type(exc).__name__}: {exc}"
        return self.reference(windows)

    @property
    def running(self) -> str:
        """``"triton"``, or ``"lookup"`` (:meth:`reference`) after the kernel failed."""
        return "triton" if self.error is None else "lookup"

    def _kernel(self, windows: Tensor) -> Tensor:
        out = torch.empty(windows.shape, dtype=torch.float32, device=windows.device)
        plane = windows.shape[2] * windows.shape[3]
        if out.numel():
            _normalize_kernel[(triton.cdiv(plane, self.BLOCK), windows.shape[0] * 9)](
                windows, self.lut, out, plane, 9, BLOCK=self.BLOCK, num_warps=4)
        return out

    def reference(self, windows: Tensor) -> Tensor:
        """The same lookup as torch ops (an ``int64`` index a pixel: for the tests, and where
        the kernel cannot run)."""
        channel = torch.arange(9, device=windows.device).view(1, 9, 1, 1) * 256
        return self.lut.to(windows.device)[windows.to(torch.int64) + channel]

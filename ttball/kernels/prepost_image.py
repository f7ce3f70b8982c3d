"""Frames on the device: JPEG bytes → RGB ``uint8`` → the network's size → normalised windows.

The pre-processing of :mod:`ttball.frames`, done with torch ops on any device so that the
frames of a batch never leave the GPU:

- :class:`JpegDecoder`: a list of JPEG byte strings → ``(3, H, W) uint8`` RGB tensors on the
  device. nvJPEG through ``torchvision.io.decode_jpeg(list, device="cuda")`` when torchvision
  with CUDA is installed; else ``cv2.imdecode`` on the host (what the worker does today, so
  pixels are identical to the CPU path) and one copy to the device. nvJPEG's IDCT and chroma
  upsampling are not libjpeg-turbo's, so its pixels differ from ``cv2.imdecode`` by a few
  levels; ``scripts/gpu_e2e.py`` measures by how much.
- :class:`Resizer`: ``(B, 3, H, W) uint8`` → ``(B, 3, h, w) uint8``, **bit-exact** with
  ``cv2.resize(..., INTER_LINEAR)`` on 8-bit images (OpenCV 5.0.0 x86; tested on down- and
  up-scaling, odd sizes and the 2× case OpenCV routes to INTER_AREA). OpenCV's 8-bit bilinear
  is fixed point: 11-bit weights, a horizontal pass into ``int32``, then a vertical pass that
  drops 4 bits, keeps the high 16 bits of each 16×16-bit product and rounds with ``+2 >> 2``.
  A plain float ``F.interpolate(mode="bilinear")`` + round differs by 1 level in 8–13 % of the
  values (``tests/kernels/test_prepost.py`` measures it), hence the emulation.
- :func:`stack_windows`: three frames per window, oldest first → ``(B, 9, h, w) uint8``, which
  :func:`ttball.frames.normalize` turns into the network's float input on the device.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import cv2
import numpy as np
import torch
from torch import Tensor

from ttball.frames import IMREAD_FLAGS, host_to_device

COEF_BITS = 11  # OpenCV's INTER_RESIZE_COEF_BITS: weights are multiples of 1/2048
COEF_SCALE = 1 << COEF_BITS


class DecodeError(ValueError):
    """A frame that is not a decodable JPEG; ``index`` is its position in the batch."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(f"frame {index} of the batch: {message}")
        self.index, self.reason = index, message


def gpu_jpeg_reason(device: torch.device) -> str | None:
    """Why nvJPEG through torchvision can't decode on ``device``; None when it can."""
    if device.type != "cuda":
        return f"device is {device.type}, not cuda"
    try:
        import torchvision  # noqa: F401
        from torchvision.io import decode_jpeg  # noqa: F401
    except Exception as exc:  # noqa: BLE001  (any import failure means: not available)
        return f"torchvision is not importable ({type(exc).__name__}: {exc})"
    return None


def _preload_nvjpeg() -> None:
    """Load ``libnvjpeg`` from the ``nvidia-nvjpeg`` wheel, wherever it was installed on
    ``sys.path``, so nvImageCodec's own ``dlopen`` by name finds it (best effort)."""
    import ctypes
    import glob
    import sys

    for root in sys.path:
        for lib in sorted(glob.glob(os.path.join(root or ".", "nvidia", "*", "lib", "libnvjpeg.so*"))):
            try:
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                continue


def _open_nvimgcodec(device: torch.device, hardware: bool = False) -> tuple[Any, str | None]:
    """An nvImageCodec decoder for ``device`` and None, or None and why it can't decode there.
    It decodes a small JPEG to find out: the library imports without nvJPEG and then decodes
    nothing. ``hardware``: only the GPU's JPEG engines (``BackendKind.HW_GPU_ONLY``; A100,
    H100/H200 and later have them), no CUDA-core or host decoding."""
    if device.type != "cuda":
        return None, f"device is {device.type}, not cuda"
    try:
        _preload_nvjpeg()
        from nvidia import nvimgcodec

        index = device.index if device.index is not None else torch.cuda.current_device()
        kinds = [nvimgcodec.BackendKind.HW_GPU_ONLY] if hardware else None
        decoder = nvimgcodec.Decoder(device_id=index, backend_kinds=kinds)
        probe = cv2.imencode(".jpg", np.full((64, 64, 3), 128, np.uint8))[1].tobytes()
        image = decoder.decode([nvimgcodec.CodeStream(probe)])[0]
    except Exception as exc:  # noqa: BLE001  (any failure means: not available)
        return None, f"nvidia-nvimgcodec is not usable ({type(exc).__name__}: {exc})"
    if image is None:
        if hardware:
            return None, "nvidia-nvimgcodec: this GPU's hardware JPEG decoder decoded nothing"
        return None, "nvidia-nvimgcodec decoded nothing (is nvidia-nvjpeg installed?)"
    return decoder, None


def nvimgcodec_reason(device: torch.device, hardware: bool = False) -> str | None:
    """Why nvImageCodec (``hardware``: its hardware JPEG engines) can't decode on ``device``;
    None when it can (``pip install nvidia-nvimgcodec-cu13 nvidia-nvjpeg``)."""
    return _open_nvimgcodec(device, hardware)[1]


def _open_own(device: torch.device) -> tuple[Any, str | None]:
    """An ``nvjpeg-own`` decoder for ``device`` and None, or None and why it can't decode
    there (its build, run at first use, failed; or it decoded a small JPEG wrongly)."""
    from ttball.kernels import nvjpeg_own

    reason = nvjpeg_own.own_reason(device)
    if reason:
        return None, reason
    try:
        decoder = nvjpeg_own.OwnNvjpeg(device)
        probe = np.full((16, 24, 3), (200, 100, 50), np.uint8)
        image = decoder([cv2.imencode(".jpg", probe)[1].tobytes()])[0]
        if image.shape != (3, 16, 24) or abs(int(image[0].float().mean().item()) - 50) > 4:
            return None, f"nvjpeg-own decoded a test frame wrongly ({tuple(image.shape)})"
    except (RuntimeError, OSError) as exc:
        return None, f"nvjpeg-own is not usable ({exc})"
    return decoder, None


def decode_cv2(data: bytes, index: int = 0) -> Tensor:
    """One JPEG (or PNG) → ``(3, H, W) uint8`` RGB on the host, exactly as the worker decodes."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), IMREAD_FLAGS)
    if bgr is None or bgr.ndim != 3 or bgr.size == 0:
        raise DecodeError(index, "not a decodable image")
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    return torch.from_numpy(rgb).permute(2, 0, 1)


DECODERS = ("nvjpeg", "nvjpeg-own", "nvimgcodec", "nvimgcodec-hw", "cv2")
# the nvImageCodec decoders a library asks for tries, in order, before nvJPEG and cv2
_NVIMGCODEC_TRIES = {"nvimgcodec-hw": ("nvimgcodec-hw", "nvimgcodec"),
                     "nvimgcodec": ("nvimgcodec",)}


class JpegDecoder:
    """A batch of JPEG byte strings → RGB ``(3, H, W) uint8`` tensors on ``device``.

    ``kind``: ``"nvjpeg"`` (nvJPEG through torchvision, on the GPU), ``"nvimgcodec"`` (NVIDIA's
    nvImageCodec, on the GPU: it takes the caller's CUDA stream, where torchvision's call ends
    by waiting for a stream of its own; on the H200 its call still held the thread for as long
    as the decode took, ``docs/benchmarks/e2e.md``), ``"nvimgcodec-hw"`` (nvImageCodec on the
    GPU's hardware JPEG engines only, which leave the SMs to the network; a frame the engines
    refuse, such as a progressive JPEG, is decoded by the general nvImageCodec decoder) or
    ``"cv2"`` (host decode, then one pinned copy per frame), or ``"nvjpeg-own"`` (experimental:
    nvJPEG built here with allocators of its own, on the JPEG engines, its batch queued on the
    current stream without a wait; :mod:`ttball.kernels.nvjpeg_own`). ``library`` asks for one;
    a GPU library that can't run here falls back to the next (nvimgcodec-hw → nvimgcodec →
    nvjpeg → cv2; nvjpeg-own → nvjpeg → cv2), and ``gpu_reason`` says why.
    ``prefer_gpu=False`` is ``library="cv2"``. A batch that nvJPEG (or nvjpeg-own) fails is
    decoded frame by frame, a frame it refuses on the host as the host path decodes it (a CMYK
    JPEG, say); only a frame OpenCV cannot read either raises :class:`DecodeError`.
    """

    def __init__(self, device: torch.device | str, prefer_gpu: bool = True,
                 library: str = "nvjpeg") -> None:
        if library not in DECODERS:
            raise ValueError(f"unknown JPEG decoder {library!r} (one of {', '.join(DECODERS)})")
        self.device = torch.device(device)
        self._nvimg: Any = None  # the nvImageCodec decoder, when kind is "nvimgcodec(-hw)"
        self._nvimg_any: Any = None  # with "nvimgcodec-hw": the general one, for refused frames
        self._own: Any = None  # the OwnNvjpeg decoder, when kind is "nvjpeg-own"
        if not prefer_gpu or library == "cv2":
            self.gpu_reason: str | None = "cv2 decode requested"
            self.kind = "cv2"
            return
        reasons: list[str] = []
        self.kind = ""
        for kind in _NVIMGCODEC_TRIES.get(library, ()):
            self._nvimg, reason = _open_nvimgcodec(self.device, hardware=kind.endswith("-hw"))
            if reason is None:
                self.kind = kind
                break
            reasons.append(reason)
        if library == "nvjpeg-own":
            self._own, reason = _open_own(self.device)
            if reason is None:
                self.kind = "nvjpeg-own"
            else:
                reasons.append(reason)
        if not self.kind:
            reason = gpu_jpeg_reason(self.device)
            self.kind = "cv2" if reason else "nvjpeg"
            if reason:
                reasons.append(reason)
        self.gpu_reason = "; ".join(dict.fromkeys(reasons)) or None

    def __call__(self, blobs: Sequence[bytes]) -> list[Tensor]:
        if not blobs:
            return []
        if self.kind == "nvjpeg":
            return self._nvjpeg(blobs)
        if self.kind == "nvjpeg-own":
            return self._nvjpeg_own(blobs)
        if self.kind.startswith("nvimgcodec"):
            return self._nvimgcodec(blobs)
        return [self._host(blobs, i) for i in range(len(blobs))]

    def _nvimgcodec(self, blobs: Sequence[bytes]) -> list[Tensor]:
        from nvidia import nvimgcodec

        streams = []
        for i, data in enumerate(blobs):
            try:
                streams.append(nvimgcodec.CodeStream(bytes(data)))
            except RuntimeError as exc:  # no image header
                raise DecodeError(i, f"nvImageCodec: {exc}") from None
        cuda_stream = (torch.cuda.current_stream(self.device).cuda_stream
                       if self.device.type == "cuda" else 0)
        images = self._nvimg.decode(streams, cuda_stream=cuda_stream)
        refused = [i for i, image in enumerate(images) if image is None]
        if refused and self.kind == "nvimgcodec-hw":
            if self._nvimg_any is None:
                self._nvimg_any, reason = _open_nvimgcodec(self.device)
                if reason:
                    raise DecodeError(refused[0], f"the hardware decoder refused it and {reason}")
            again = self._nvimg_any.decode([streams[i] for i in refused], cuda_stream=cuda_stream)
            for i, image in zip(refused, again):
                images[i] = image
        out = []
        for i, image in enumerate(images):
            if image is None:
                raise DecodeError(i, "nvImageCodec: not a decodable JPEG")
            # HWC interleaved RGB; the tensor keeps the image's buffer alive
            out.append(torch.as_tensor(image, device=self.device).permute(2, 0, 1))
        return out

    def _nvjpeg_own(self, blobs: Sequence[bytes]) -> list[Tensor]:
        from ttball.kernels.nvjpeg_own import DecodeFailed

        try:
            return self._own(blobs)
        except DecodeFailed:  # one frame fails the batch: each alone, the host for a refused one
            return _one_by_one(lambda data: self._own([data])[0], blobs, DecodeFailed,
                               lambda i: self._host(blobs, i))

    def _host(self, blobs: Sequence[bytes], index: int) -> Tensor:
        """Frame ``index`` decoded as the host path decodes it, on the device."""
        return self._to_device(decode_cv2(blobs[index], index))

    def _to_device(self, rgb: Tensor) -> Tensor:
        if self.device.type == "cpu":
            return rgb
        return host_to_device(rgb.contiguous(), self.device)

    def _nvjpeg(self, blobs: Sequence[bytes]) -> list[Tensor]:
        from torchvision.io import ImageReadMode, decode_jpeg

        data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
        try:
            return list(decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device))
        except RuntimeError:  # one bad frame fails the whole batch
            return _one_by_one(
                lambda d: decode_jpeg(d, mode=ImageReadMode.RGB, device=self.device), data,
                RuntimeError, lambda i: self._host(blobs, i))


def _one_by_one(decode: Callable[[Any], Tensor], items: Sequence[Any],
                errors: type[Exception], host: Callable[[int], Tensor]) -> list[Tensor]:
    """A batch that failed as a whole, decoded frame by frame: a frame that raises ``errors``
    is decoded by ``host(index)`` as the host path decodes it (nvJPEG refuses what OpenCV
    reads, e.g. a CMYK JPEG), and the first that fails there too becomes a
    :class:`DecodeError` with its index."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(decode(item))
        except errors as exc:
            try:
                out.append(host(i))
            except DecodeError:
                raise DecodeError(i, f"nvJPEG: {exc}") from None
    return out


def _taps(src: int, dst: int, clamp: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """OpenCV's bilinear taps along one axis: source indices (lo, hi) and 11-bit weights.

    Mirrors ``cv::resize``'s float32 arithmetic: ``f = (float)((d + 0.5) * scale - 0.5)``,
    ``s = floor(f)``, ``f -= s``, weights ``round((1 - f) * 2048)``, ``round(f * 2048)``
    (round half to even, as ``cvRound``). Along x (``clamp``) a tap left of the image or on its
    last column gets weight (2048, 0); along y the weights stay and the rows are clamped.
    """
    scale = 1.0 / (dst / src)
    lo, w_lo, w_hi = np.empty(dst, np.int64), np.empty(dst, np.int32), np.empty(dst, np.int32)
    for d in range(dst):
        f = np.float32((d + 0.5) * scale - 0.5)
        s = math.floor(f)
        f = np.float32(f - np.float32(s))
        if clamp and s < 0:
            f, s = np.float32(0.0), 0
        if clamp and s >= src - 1:
            f, s = np.float32(0.0), src - 1
        lo[d] = s
        w_lo[d] = int(np.rint((np.float32(1.0) - f) * np.float32(COEF_SCALE)))
        w_hi[d] = int(np.rint(f * np.float32(COEF_SCALE)))
    return np.clip(lo, 0, src - 1), np.clip(lo + 1, 0, src - 1), w_lo, w_hi


RESIZE_MODES = ("eager", "compile", "triton")
MAX_RUNS = 4  # a list of frames in more runs than this is stacked (each run is a launch)


class Resizer:
    """``(B, 3, H, W) uint8`` → ``(B, 3, height, width) uint8`` on the input's device, equal to
    ``cv2.resize(rgb, (width, height), interpolation=cv2.INTER_LINEAR)`` per frame.

    The tap tables are built once per source size and device. ``mode``: ``"eager"``, the
    fixed-point arithmetic as about a dozen ``int32`` passes over the output; ``"compile"``,
    those passes fused by ``torch.compile`` (dynamic batch size); ``"triton"``, one Triton
    kernel doing the same arithmetic (:mod:`ttball.kernels.prepost_pixels`; CUDA, or Triton's
    interpreter); all three equal bit for bit. If the chosen one fails, ``compile_error`` says
    why and the eager version runs. A call may also take a list of frames: those laid one after
    another in one buffer (a decode call's run) are read in place, without a stack's copy, by
    the Triton kernel.
    """

    def __init__(self, height: int, width: int, mode: str = "eager") -> None:
        if mode not in RESIZE_MODES:
            raise ValueError(f"mode must be one of {', '.join(RESIZE_MODES)}, got {mode!r}")
        self.height, self.width, self.mode = height, width, mode
        self._tables: dict[tuple[int, int, torch.device], tuple[Tensor, ...]] = {}
        self._core: Any = _resize_taps
        self.compile_error: str | None = None
        if mode == "compile":
            self._core = torch.compile(_resize_taps, dynamic=True)
        elif mode == "triton":
            try:
                from ttball.kernels.prepost_pixels import resize
            except ImportError as exc:
                self.compile_error = f"{type(exc).__name__}: {exc}"
            else:
                self._core = resize

    @property
    def compiled(self) -> bool:
        """Whether the compiled resize runs (False: eager, asked for or after a failed compile)."""
        return self.running == "compile"

    @property
    def running(self) -> str:
        """The mode that runs: ``mode``, or ``"eager"`` after the chosen one failed."""
        return "eager" if self._core is _resize_taps else self.mode

    def warm(self, device: torch.device) -> None:
        """Compile every graph or kernel a worker can need, before it is ready: for
        ``"compile"`` one graph for a single frame (Dynamo specializes a size of 1) and one for
        any other count and source size (without it the first push of a lone frame compiled
        again: a 2-5 s stall under load, seventh session, ``serve-h200.md``); for ``"triton"``
        its kernel. A no-op when eager."""
        if self.running != "eager":
            for count in (1, 2):
                self(torch.zeros(count, 3, 16, 24, dtype=torch.uint8, device=device))

    def _table(self, src_h: int, src_w: int, device: torch.device) -> tuple[Tensor, ...]:
        key = (src_h, src_w, device)
        if key not in self._tables:
            x = _taps(src_w, self.width, clamp=True)
            y = _taps(src_h, self.height, clamp=False)
            xs = [torch.from_numpy(a).to(device) for a in x]
            ys = [torch.from_numpy(a).to(device) for a in y]
            ys[2], ys[3] = ys[2][:, None], ys[3][:, None]  # row weights broadcast along x
            self._tables[key] = (*xs, *ys)
        return self._tables[key]

    def __call__(self, frames: Tensor | Sequence[Tensor]) -> Tensor:
        if not isinstance(frames, Tensor):
            return self._resize_list(frames)
        if frames.dtype != torch.uint8 or frames.dim() != 4:
            raise ValueError(f"expected (B, C, H, W) uint8 frames, got {frames.dtype} {tuple(frames.shape)}")
        src_h, src_w = frames.shape[-2:]
        if (src_h, src_w) == (self.height, self.width):
            return frames  # cv2.resize copies; so do the taps (weights 2048, 0)
        tables = self._table(src_h, src_w, frames.device)
        if self._core is _resize_taps:
            return _resize_taps(frames, *tables)
        try:
            return self._core(frames, *tables)
        except Exception as exc:  # noqa: BLE001  (reported in compile_error; eager is exact too)
            self._fail(exc)
            return _resize_taps(frames, *tables)

    def _resize_list(self, frames: Sequence[Tensor]) -> Tensor:
        """A list of ``(3, H, W)`` frames of one size. The Triton kernel reads them in place
        when they make at most ``MAX_RUNS`` runs in buffers (:func:`~ttball.kernels.
        prepost_pixels.runs`: a decode call's frames, one run a decode child), a launch a run,
        instead of after a stack's copy of every frame (2.8 MB a 1280×720 frame, read and
        written); otherwise, and in the other modes, their stack is resized."""
        first = frames[0] if len(frames) else None
        if (self.running != "triton" or first is None or first.dtype != torch.uint8
                or first.dim() != 3 or tuple(first.shape[-2:]) == (self.height, self.width)
                or any(f.shape != first.shape for f in frames)):
            return self(torch.stack(list(frames)))
        from ttball.kernels.prepost_pixels import runs

        views = runs(frames)
        if len(views) > MAX_RUNS:
            return self(torch.stack(list(frames)))
        tables = self._table(first.shape[-2], first.shape[-1], first.device)
        out = torch.empty(len(frames), first.shape[0], self.height, self.width,
                          dtype=torch.uint8, device=first.device)
        start = 0
        try:
            for view in views:
                self._core(view, *tables, out=out[start:start + len(view)])
                start += len(view)
        except Exception as exc:  # noqa: BLE001  (as in __call__)
            self._fail(exc)
            return _resize_taps(torch.stack(list(frames)), *tables)
        return out

    def _fail(self, exc: Exception) -> None:
        self.compile_error = f"{type(exc).__name__}: {exc}"
        self._core = _resize_taps


def _resize_taps(frames: Tensor, x_lo: Tensor, x_hi: Tensor, a_lo: Tensor, a_hi: Tensor,
                 y_lo: Tensor, y_hi: Tensor, b_lo: Tensor, b_hi: Tensor) -> Tensor:
    """OpenCV's 8-bit bilinear: horizontal taps in ``int32`` (exact), ``>> 4``, then per row
    the high 16 bits of each product with the row weight, summed, ``(t + 2) >> 2``."""

    def row_pass(rows: Tensor) -> Tensor:
        wide = rows.index_select(3, x_lo).to(torch.int32) * a_lo
        wide += rows.index_select(3, x_hi).to(torch.int32) * a_hi
        return wide >> 4

    top = (row_pass(frames.index_select(2, y_lo)) * b_lo) >> 16
    bottom = (row_pass(frames.index_select(2, y_hi)) * b_hi) >> 16
    return ((top + bottom + 2) >> 2).clamp_(0, 255).to(torch.uint8)


def stack_windows(windows: Sequence[Sequence[Tensor]]) -> Tensor:
    """Windows of three ``(3, h, w) uint8`` frames, oldest first → ``(B, 9, h, w) uint8``."""
    frames = [f for window in windows for f in window]
    h, w = frames[0].shape[-2:]
    return torch.stack(frames).view(len(windows), 9, h, w)

"""The ``nvjpeg-own`` JPEG decoder: nvJPEG with allocators of its own (CUDA only; experimental).

Written because every GPU JPEG decoder measured on the H200 waited, in its call, for all of its
process's GPU work (twenty-ninth session, ``docs/benchmarks/LOG.md``), and torchvision's decoder
creates nvJPEG with the default allocators, whose frees wait for the whole device.
``nvjpeg_own.c`` creates it with stream-ordered device allocations (``cudaMallocAsync`` /
``cudaFreeAsync`` on the decode's stream), a pinned pool it never gives back and nvJPEG's
memory pools, on the GPU's JPEG engines when it has them (a frame they refuse, such as a progressive JPEG, decoded alone
by the default backend), and queues a batch on the caller's current stream without waiting.
A frame whose header can't be read is named (:class:`DecodeFailed`, a 400 in the server); one
whose header reads but whose entropy-coded data is damaged may decode to wrong pixels without
an error, since the decode is not waited for. (The server refuses a JPEG cut short before it
gets here: :func:`ttball.serve.uploads.jpeg_truncated`.)

Measured (fifty-second session, ``docs/benchmarks/h100-2026-12-06/``): on an H100 neither
decoder waited for another stream's kernel; this one's call returned in 0.1-0.4 ms against
torchvision's 0.6-0.9, its frames done as soon. In serve's six-replica shape at 64 sessions a
frame's lane time stayed level (the wait moved to the duplicate check's read-back) and p99 rose;
hence experimental, not the default.

The C is compiled at first use by the toolkit's ``nvcc`` against the shared CUDA runtime and
the nvJPEG found by :func:`nvjpeg_location` (the toolkit's, else the ``nvidia-nvjpeg`` wheel's),
into a digest-named library in the kernels' cache (:func:`ttball.kernels.direct.nvcc_library`:
one build at a time, a reader never sees half of one). :func:`own_reason` says why it can't run
here; :class:`ttball.kernels.prepost_image.JpegDecoder` then falls back to ``nvjpeg``.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("nvjpeg_own.c")

_P, _I, _S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_INT_P = ctypes.POINTER(ctypes.c_int)
_SIGNATURES = {  # name: (argument types, result type)
    "nj_error": ([], ctypes.c_char_p),
    "nj_create": ([_I], _P),
    "nj_destroy": ([_P], None),
    "nj_engines": ([_P], _I),
    "nj_size": ([_P, _P, _S, _INT_P, _INT_P], _I),
    "nj_decode": ([_P, _I, _P, _P, _P, _P, _P, _INT_P], _I),
}


class DecodeFailed(RuntimeError):
    """nvJPEG refused a batch; ``index`` is the frame it names, or None for the whole batch."""

    def __init__(self, index: int | None, message: str) -> None:
        super().__init__(message)
        self.index = index


def nvjpeg_location(cuda_home: str | None = None,
                    roots: Sequence[str] | None = None) -> tuple[Path, Path] | None:
    """The folder holding ``nvjpeg.h`` and the nvJPEG shared library beside it, first in the
    CUDA toolkit at ``cuda_home`` (PyTorch's ``CUDA_HOME``), then in an ``nvidia-nvjpeg`` wheel
    on ``roots`` (``sys.path``): ``nvidia/<name>/include`` and ``nvidia/<name>/lib``; None when
    neither has both."""
    if cuda_home is None:
        from torch.utils.cpp_extension import CUDA_HOME

        cuda_home = CUDA_HOME
    places: list[tuple[Path, Path]] = []
    if cuda_home:
        home = Path(cuda_home)
        places += [(home / "include", home / "lib64"),
                   (home / "targets" / "x86_64-linux" / "include",
                    home / "targets" / "x86_64-linux" / "lib")]
    for root in sys.path if roots is None else roots:
        for name in sorted(glob.glob(os.path.join(root or ".", "nvidia", "*", "include"))):
            places.append((Path(name), Path(name).parent / "lib"))
    for headers, lib in places:
        if (headers / "nvjpeg.h").is_file():
            found = sorted(lib.glob("libnvjpeg.so*"))
            if found:
                return headers, found[0]
    return None


def build(directory: Path, nvcc: str, include: Path, library: Path) -> Path:
    """``nvjpeg_own.c`` compiled into ``directory`` against nvJPEG's header folder ``include``
    and shared ``library`` (a versioned name such as ``libnvjpeg.so.13`` as a wheel has it,
    linked by that name and found at run time through the rpath)."""
    from ttball.kernels.direct import nvcc_library

    key = f"{SOURCE.read_text()}|{include}|{library}"
    return nvcc_library(directory, "ttball_nvjpeg_own", key, SOURCE, ["-O2", f"-I{include}"],
                        nvcc, libraries=[f"-L{library.parent}", f"-l:{library.name}",
                                         "-Xlinker", f"-rpath={library.parent}"])


_LIBRARY: ctypes.CDLL | None = None
_FAILED: str | None = None  # why the build or load failed: not tried again in this process


def own_reason(device: torch.device) -> str | None:
    """Why ``nvjpeg-own`` can't decode on ``device`` (and builds nothing); None when it may."""
    from ttball.kernels.direct import nvcc_path

    if device.type != "cuda":
        return f"device is {device.type}, not cuda"
    if _FAILED:
        return _FAILED
    if _LIBRARY is None:
        if nvcc_path() is None:
            return "nvjpeg-own needs nvcc (CUDA's compiler) to build its decoder"
        if nvjpeg_location() is None:
            return ("nvjpeg-own needs nvJPEG's header and library (the CUDA toolkit's, or "
                    "pip install nvidia-nvjpeg)")
    return None


def load_library() -> ctypes.CDLL:
    """The built decoder (built at first use, then cached on disk and in this process)."""
    global _LIBRARY, _FAILED
    from ttball.kernels.direct import library_dir, nvcc_path

    if _FAILED:
        raise RuntimeError(_FAILED)
    if _LIBRARY is None:
        nvcc, found = nvcc_path(), nvjpeg_location()
        try:
            if nvcc is None or found is None:
                raise RuntimeError("needs nvcc and nvJPEG's header and library")
            lib = ctypes.CDLL(str(build(library_dir(), nvcc, *found)))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            _FAILED = f"building nvjpeg-own failed: {type(exc).__name__}: {exc}"
            raise RuntimeError(_FAILED) from exc
        _LIBRARY = typed(lib)
    return _LIBRARY


def typed(lib: ctypes.CDLL) -> ctypes.CDLL:
    """``lib`` (a build of ``nvjpeg_own.c``) with its functions' argument and result types."""
    for name, (argtypes, restype) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    return lib


class OwnNvjpeg:
    """JPEG byte strings → ``(3, H, W) uint8`` RGB tensors on ``device``, decoded by
    ``nvjpeg_own.c`` on the current CUDA stream (not waited for: the tensors are ready for that
    stream's later work, as any op's output). ``hardware``: on the GPU's JPEG engines, when it
    has them (``engines`` says whether it does). One per lane: a handle is not shared between
    threads. ``library``: a loaded build (tests); default :func:`load_library`."""

    def __init__(self, device: torch.device | str, hardware: bool = True,
                 library: ctypes.CDLL | None = None) -> None:
        self.device = torch.device(device)
        self.lib = library or load_library()
        with self._current():
            handle = self.lib.nj_create(int(hardware))
        if not handle:
            raise RuntimeError(f"nvjpeg-own: {self.lib.nj_error().decode()}")
        self._handle: ctypes.c_void_p | None = ctypes.c_void_p(handle)
        self.engines = bool(self.lib.nj_engines(self._handle))
        # the last call's input bytes: kept until the next call (nvJPEG reads them during it)
        self._inputs: list[ctypes.Array[ctypes.c_char]] = []

    def _current(self) -> contextlib.AbstractContextManager[object]:
        """``device`` made current (a CPU device, as the tests' fake nvJPEG has it: nothing)."""
        if self.device.type == "cuda":
            return torch.cuda.device(self.device)
        return contextlib.nullcontext()

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None:
            self.lib.nj_destroy(handle)
            self._handle = None

    def _sizes(self, blobs: Sequence[bytes]) -> list[tuple[int, int]]:
        """Each frame's (width, height) from its header; :class:`DecodeFailed` names the first
        frame that has none."""
        out = []
        for i, (buffer, blob) in enumerate(zip(self._inputs, blobs)):
            width, height = ctypes.c_int(), ctypes.c_int()
            if not self.lib.nj_size(self._handle, buffer, len(blob), ctypes.byref(width),
                                    ctypes.byref(height)):
                raise DecodeFailed(i, self.lib.nj_error().decode())
            out.append((width.value, height.value))
        return out

    def __call__(self, blobs: Sequence[bytes]) -> list[Tensor]:
        n = len(blobs)
        if n == 0:
            return []
        self._inputs = [ctypes.create_string_buffer(bytes(b), len(b)) for b in blobs]
        sizes = self._sizes(blobs)
        images = [torch.empty((3, h, w), dtype=torch.uint8, device=self.device)
                  for w, h in sizes]
        data = (ctypes.c_void_p * n)(*[ctypes.addressof(b) for b in self._inputs])
        lengths = (ctypes.c_size_t * n)(*[len(b) for b in blobs])
        planes = (ctypes.c_void_p * (3 * n))(*[image[c].data_ptr() for image in images
                                                for c in range(3)])
        widths = (ctypes.c_int * n)(*[w for w, _ in sizes])
        bad = ctypes.c_int(-1)
        with self._current():
            stream = ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream
                                     if self.device.type == "cuda" else None)
            ok = self.lib.nj_decode(self._handle, n, data, lengths, planes, widths, stream,
                                    ctypes.byref(bad))
        if not ok:
            raise DecodeFailed(bad.value if bad.value >= 0 else None,
                               self.lib.nj_error().decode())
        return images

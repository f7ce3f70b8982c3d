"""Which CUDA driver call the JPEG decode waits in (GPU only).

Every JPEG decoder in a process waits for all of that process's GPU work (the twenty-ninth
session's ``diag.sh``: a batch decode behind 20 ms of another stream's spinning kernel takes
~20 ms more, with nvJPEG, nvImageCodec and its hardware decoder alike), so in a replica of two
lanes one lane's decode waits for the other lane's network. Which call waits was never seen.
This script decodes batches of JPEGs with :class:`ttball.kernels.prepost_image.JpegDecoder`
alone and behind ``--ahead-ms`` of a spinning kernel on another stream, under
``scripts/cuda_wait_probe.c`` (an ``LD_PRELOAD`` library that counts and times the driver's
synchronizing, allocating and copying calls), and prints for each case the decode's wall time
and the calls made during it with their time: the call whose time grows by ``--ahead-ms`` is the
wait::

    python scripts/gpu_decode_waits.py [--decoder nvjpeg] [--batches 1 2 4] [--ahead-ms 20] \\
        [--out waits.json]

The probe is built with the host's C compiler into ``--probe`` when missing, and the script
runs itself again with it preloaded. ``--decoder own`` (``own-hw``: the hardware backend) is
``scripts/nvjpeg_own.c``, nvJPEG with stream-ordered allocators of its own, built against
``--cuda``: if its call no longer waits behind the other stream, the wait was nvJPEG's frees.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SOURCE = Path(__file__).with_name("cuda_wait_probe.c")
OWN_SOURCE = Path(__file__).with_name("nvjpeg_own.c")
PRELOADED = "TTBALL_WAIT_PROBE"


def _built(target: Path, source: Path) -> bool:
    """Whether ``target`` exists and is newer than ``source``."""
    return target.exists() and target.stat().st_mtime >= source.stat().st_mtime


def _c_compiler(what: str) -> str:
    """The host's C compiler (cc, gcc, clang); exits with one line naming ``what`` if none."""
    compiler = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if compiler is None:
        sys.exit(f"gpu_decode_waits.py: no C compiler (cc, gcc, clang) to build {what}")
    return compiler


def build_probe(target: Path) -> Path:
    """``cuda_wait_probe.c`` compiled to ``target`` (kept when it is newer than the source)."""
    if _built(target, SOURCE):
        return target
    compiler = _c_compiler("the probe")
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(target), str(SOURCE), "-ldl"],
                   check=True)
    return target


def build_own(target: Path, cuda: Path) -> Path:
    """``nvjpeg_own.c`` compiled to ``target`` against the CUDA toolkit at ``cuda`` (kept when
    it is newer than the source): with its ``nvcc`` and the shared CUDA runtime (the one PyTorch
    loaded, as ``ttball.kernels.direct`` builds its kernels), else a C compiler."""
    if _built(target, OWN_SOURCE):
        return target
    libs = [f"-L{cuda / 'lib64'}", "-lnvjpeg"]
    if (cuda / "bin" / "nvcc").is_file():
        cmd = [str(cuda / "bin" / "nvcc"), "-shared", "-O2", "-Xcompiler", "-fPIC", "-cudart",
               "shared", "-Xlinker", f"-rpath={cuda / 'lib64'}", str(OWN_SOURCE), "-o",
               str(target), *libs]
    else:
        cmd = [_c_compiler("the decoder (and no nvcc)"), "-shared", "-fPIC", "-O2",
               f"-I{cuda / 'include'}", "-o", str(target),
               str(OWN_SOURCE), f"-Wl,-rpath,{cuda / 'lib64'}", *libs, "-lcudart"]
    subprocess.run(cmd, check=True)
    return target


class OwnDecoder:
    """``nvjpeg_own.c``: nvJPEG with stream-ordered allocators of its own, its batch decode
    queued on the current stream and not waited for; returns CHW uint8 tensors as
    :class:`~ttball.kernels.prepost_image.JpegDecoder` does."""

    def __init__(self, library: Path, hardware: bool) -> None:
        self.lib = ctypes.CDLL(str(library))
        self.lib.nj_create.restype = ctypes.c_void_p
        self.lib.nj_error.restype = ctypes.c_char_p
        handle = self.lib.nj_create(int(hardware))
        if not handle:
            raise RuntimeError(self.lib.nj_error().decode())
        self.handle = ctypes.c_void_p(handle)
        self.kind = "own-hw" if hardware else "own"
        self._inputs: list[ctypes.Array[ctypes.c_char]] = []  # alive until the next call

    def __call__(self, blobs: list[bytes]) -> list[Any]:
        import torch

        n = len(blobs)
        self._inputs = [ctypes.create_string_buffer(b, len(b)) for b in blobs]
        sizes = []
        for buffer, blob in zip(self._inputs, blobs):
            width, height = ctypes.c_int(), ctypes.c_int()
            if not self.lib.nj_size(self.handle, buffer, ctypes.c_size_t(len(blob)),
                                    ctypes.byref(width), ctypes.byref(height)):
                raise RuntimeError(self.lib.nj_error().decode())
            sizes.append((width.value, height.value))
        images = [torch.empty((3, h, w), dtype=torch.uint8, device="cuda") for w, h in sizes]
        data = (ctypes.c_void_p * n)(*[ctypes.addressof(b) for b in self._inputs])
        lengths = (ctypes.c_size_t * n)(*[len(b) for b in blobs])
        planes = (ctypes.c_void_p * (3 * n))(*[image[c].data_ptr() for image in images
                                                for c in range(3)])
        widths = (ctypes.c_int * n)(*[w for w, _ in sizes])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if not self.lib.nj_decode(self.handle, n, data, lengths, planes, widths, stream):
            raise RuntimeError(self.lib.nj_error().decode())
        return images


class Probe:
    """The preloaded probe's counters."""

    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path))
        self.lib.probe_name.restype = ctypes.c_char_p
        self.names = [self.lib.probe_name(i).decode() for i in range(self.lib.probe_count())]

    def reset(self) -> None:
        self.lib.probe_reset()

    def read(self) -> dict[str, tuple[int, float]]:
        """Each called function's (calls, ms) since the last reset."""
        n = len(self.names)
        calls, seconds = (ctypes.c_long * n)(), (ctypes.c_double * n)()
        self.lib.probe_read(calls, seconds)
        return {name: (calls[i], 1e3 * seconds[i]) for i, name in enumerate(self.names)
                if calls[i]}


def jpegs(count: int, width: int, height: int) -> list[bytes]:
    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        noise = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        image = cv2.GaussianBlur(noise, (9, 9), 3)
        ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        out.append(data.tobytes())
    return out


def measure(args: argparse.Namespace, probe: Probe) -> dict[str, object]:
    import torch

    from ttball.bench.timing import cycles_per_ms
    from ttball.kernels.prepost_image import JpegDecoder

    width, height = (int(v) for v in args.frame_size.split("x"))
    blobs = jpegs(max(args.batches), width, height)
    pixels_vs_nvjpeg = None
    decoder: Any
    if args.decoder in ("own", "own-hw"):
        decoder = OwnDecoder(build_own(args.own_library, args.cuda), args.decoder == "own-hw")
        want = JpegDecoder("cuda", library="nvjpeg")(blobs)
        got = decoder(blobs)
        pixels_vs_nvjpeg = max(int((g.int() - w.int()).abs().max()) for g, w in zip(got, want))
    else:
        decoder = JpegDecoder("cuda", library=args.decoder)
        if decoder.kind != args.decoder:
            sys.exit(f"gpu_decode_waits.py: {args.decoder} fell back to {decoder.kind} "
                     f"({decoder.gpu_reason})")
    for b in args.batches:  # warm every batch size (nvJPEG sizes its buffers on first use)
        decoder(blobs[:b])
        decoder(blobs[:b])
    torch.cuda.synchronize()
    cycles = int(args.ahead_ms * cycles_per_ms(torch.device("cuda")))
    side = torch.cuda.Stream()
    rows = []
    for b in args.batches:
        for case in ("alone", "behind"):
            for _ in range(args.repeats):
                torch.cuda.synchronize()
                if case == "behind":
                    with torch.cuda.stream(side):
                        torch.cuda._sleep(cycles)
                probe.reset()
                t0 = time.perf_counter()
                decoder(blobs[:b])
                wall = 1e3 * (time.perf_counter() - t0)
                calls = probe.read()
                torch.cuda.current_stream().synchronize()  # the decode's results ready
                done = 1e3 * (time.perf_counter() - t0)
                rows.append({"batch": b, "case": case, "wall_ms": wall, "done_ms": done,
                             "calls": calls})
    torch.cuda.synchronize()
    return {"decoder": decoder.kind, "gpu": torch.cuda.get_device_name(),
            "frame_size": args.frame_size, "ahead_ms": args.ahead_ms,
            "pixels_vs_nvjpeg": pixels_vs_nvjpeg, "rows": rows}


def report(result: dict[str, object]) -> None:
    print(f"decoder {result['decoder']} on {result['gpu']}, {result['frame_size']} frames, "
          f"behind = {result['ahead_ms']} ms of another stream's spin kernel queued first")
    if result["pixels_vs_nvjpeg"] is not None:
        print("largest pixel difference against torchvision's nvJPEG: "
              f"{result['pixels_vs_nvjpeg']}")
    print("batch case   call ms  done ms  driver calls during the call: name calls/ms")
    for row in result["rows"]:  # type: ignore[attr-defined]
        calls = "  ".join(f"{name} {n}/{ms:.2f}" for name, (n, ms) in row["calls"].items())
        print(f"{row['batch']:5d} {row['case']:6s} {row['wall_ms']:8.2f} {row['done_ms']:8.2f}  "
              f"{calls}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decoder", default="nvjpeg",
                        help="a JpegDecoder library (nvjpeg, nvjpeg-own, ...), or own / own-hw: "
                             "scripts/nvjpeg_own.c with the default or the hardware backend")
    parser.add_argument("--own-library", type=Path, default=Path("/tmp/nvjpeg_own.so"))
    parser.add_argument("--cuda", type=Path, default=Path(os.environ.get("CUDA_HOME",
                                                                          "/usr/local/cuda")),
                        help="the CUDA toolkit that builds nvjpeg_own.c")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--frame-size", default="1280x720", metavar="WxH")
    parser.add_argument("--ahead-ms", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probe", type=Path, default=Path("/tmp/cuda_wait_probe.so"))
    parser.add_argument("--out", type=Path, help="also write the result as JSON")
    args = parser.parse_args()
    if os.environ.get(PRELOADED) != str(args.probe):
        build_probe(args.probe)
        if args.decoder == "nvjpeg-own":  # built now: under the probe, nvcc would preload it
            from ttball.kernels.nvjpeg_own import load_library

            try:
                load_library()
            except RuntimeError as exc:
                sys.exit(f"gpu_decode_waits.py: {exc}")
        env = dict(os.environ, LD_PRELOAD=str(args.probe), **{PRELOADED: str(args.probe)})
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_decode_waits.py: needs a CUDA GPU")
    result = measure(args, Probe(args.probe))
    report(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

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
runs itself again with it preloaded. ``--decoder own`` (``own-hw``: the JPEG engines, as
``nvjpeg-own`` but without its fallback and test frame) is
:class:`ttball.kernels.nvjpeg_own.OwnNvjpeg` on nvJPEG's default backend, nvJPEG with
stream-ordered allocators of its own: if its call no longer waits behind the other stream,
the wait was nvJPEG's frees.

Found on an H100 (driver 580.159, torchvision with PyTorch 2.11; fifty-second session,
``docs/benchmarks/h100-2026-12-06/``): NO decoder waited there. torchvision's nvJPEG took
0.57-0.92 ms behind the 20 ms spin against 0.58-1.18 alone (two ``cuStreamSynchronize`` of its
own stream, ~0.47 ms); ``nvjpeg-own`` returned in 0.11-0.41 ms with no synchronizing call, its
frames done as soon as torchvision's; ``own`` (the default backend: Huffman on the host) took
2.4 ms a frame either way. So the twenty-ninth session's wait is not nvJPEG's on that card.
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
PRELOADED = "TTBALL_WAIT_PROBE"


def build_probe(target: Path) -> Path:
    """``cuda_wait_probe.c`` compiled to ``target`` by the host's C compiler (kept when it is
    newer than the source); exits with one line if there is no compiler."""
    if target.exists() and target.stat().st_mtime >= SOURCE.stat().st_mtime:
        return target
    compiler = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if compiler is None:
        sys.exit("gpu_decode_waits.py: no C compiler (cc, gcc, clang) to build the probe")
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(target), str(SOURCE), "-ldl"],
                   check=True)
    return target


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
        from ttball.kernels.nvjpeg_own import OwnNvjpeg

        decoder = OwnNvjpeg("cuda", hardware=args.decoder == "own-hw")
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
    return {"decoder": args.decoder, "gpu": torch.cuda.get_device_name(),
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
                             "nvjpeg-own's OwnNvjpeg on the default or the hardware backend")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--frame-size", default="1280x720", metavar="WxH")
    parser.add_argument("--ahead-ms", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probe", type=Path, default=Path("/tmp/cuda_wait_probe.so"))
    parser.add_argument("--out", type=Path, help="also write the result as JSON")
    args = parser.parse_args()
    if os.environ.get(PRELOADED) != str(args.probe):
        build_probe(args.probe)
        if args.decoder in ("nvjpeg-own", "own", "own-hw"):  # built now: under the probe,
            # nvcc would preload it
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

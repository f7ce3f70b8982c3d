"""JPEG decoders side by side on one GPU (issue 9's end-to-end target: decode must fit in
about 80 µs of host time per frame and leave the SMs to the network).

For each decoder of :class:`ttball.kernels.prepost.JpegDecoder` (``nvjpeg``, ``nvimgcodec``,
``nvimgcodec-hw``) and batch size: frames/s to the end of the decode, and the host time of one
call (what the pipeline's thread pays before it can go on), each alone and while a stream of
FP16 matmuls keeps the SMs busy (as the network does in an overlapped pipeline). Then several
threads, each with a decoder of its own, for the aggregate rate; and each decoder's pixels
against ``cv2.imdecode`` (what the CPU path sees).

    PYTHONPATH=. python scripts/gpu_jpeg.py --out jpeg.json [--video real_rally_a.mp4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_e2e import environment, make_frames

from ttball.kernels.prepost import JpegDecoder, decode_cv2

LIBRARIES = ("nvjpeg", "nvimgcodec", "nvimgcodec-hw")


def video_frames(path: str, count: int, quality: int) -> tuple[list[bytes], dict[str, Any]]:
    cap, blobs = cv2.VideoCapture(path), []
    while len(blobs) < count:
        ok, bgr = cap.read()
        if not ok:
            break
        blobs.append(cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])[1].tobytes())
    if not blobs:
        raise SystemExit(f"{path}: no frames")
    sizes = [len(b) for b in blobs]
    return blobs, {"source": Path(path).name, "count": len(blobs), "quality": quality,
                   "jpeg_kb_mean": statistics.mean(sizes) / 1e3}


def timed(decode: Callable[[], Any], calls: int) -> dict[str, float]:
    """Median host ms of a call (until it returns) and ms to the end of its decode."""
    host, total = [], []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        decode()
        host.append(time.perf_counter() - start)
        torch.cuda.synchronize()
        total.append(time.perf_counter() - start)
    return {"host_ms": 1e3 * statistics.median(host), "total_ms": 1e3 * statistics.median(total)}


class Busy:
    """FP16 matmuls queued on a side stream, about ``ms`` of SM work at a time, until stopped."""

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device)
        self.a = torch.randn(8192, 8192, device=device, dtype=torch.half)

    def queue(self, count: int) -> None:
        with torch.cuda.stream(self.stream):
            for _ in range(count):
                torch.mm(self.a, self.a)


def threaded_rate(library: str, device: torch.device, chunk: list[bytes], threads: int,
                  seconds: float = 2.0) -> float:
    """Frames/s of ``threads`` threads, each decoding ``chunk`` on its own decoder and stream."""
    decoders = [JpegDecoder(device, library=library) for _ in range(threads)]
    for decoder in decoders:
        decoder(chunk[:4])
    done = [0] * threads
    stop = time.perf_counter() + seconds

    def work(k: int) -> None:
        stream = torch.cuda.Stream(device)
        with torch.cuda.stream(stream):
            while time.perf_counter() < stop:
                decoders[k](chunk)
                stream.synchronize()
                done[k] += len(chunk)

    start = time.perf_counter()
    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(done) / (time.perf_counter() - start)


def measure_one(library: str, blobs: list[bytes], device: torch.device, busy: Busy,
                batches: list[int], calls: int, threads: list[int]) -> dict[str, Any]:
    decoder = JpegDecoder(device, library=library)
    row: dict[str, Any] = {"kind": decoder.kind, "reason": decoder.gpu_reason}
    if decoder.kind != library:
        return row
    decoder(blobs[:4])  # first call: set-up
    for batch in batches:
        chunk = (blobs * (batch // len(blobs) + 1))[:batch]
        alone = timed(lambda c=chunk: decoder(c), calls)
        busy.queue(40)  # about 60 ms of matmuls ahead of the decodes
        loaded = timed(lambda c=chunk: decoder(c), max(3, calls // 2))
        torch.cuda.synchronize()
        row[f"batch_{batch}"] = {
            "alone": {**alone, "frames_per_s": 1e3 * batch / alone["total_ms"],
                      "host_us_per_frame": 1e3 * alone["host_ms"] / batch},
            "sms_busy": {**loaded, "host_us_per_frame": 1e3 * loaded["host_ms"] / batch},
        }
    d = torch.stack([(g.cpu().int() - decode_cv2(b).int()).abs()
                     for g, b in zip(decoder(blobs[:8]), blobs[:8], strict=True)]).float()
    row["vs_cv2_pixels"] = {"max": float(d.max()), "mean": float(d.mean()),
                            "share_differing": float((d > 0).float().mean())}
    batch = batches[len(batches) // 2]
    chunk = (blobs * (batch // len(blobs) + 1))[:batch]
    for n in threads:
        row[f"threads_{n}_batch_{batch}_frames_per_s"] = threaded_rate(library, device, chunk, n)
    return row


def measure(blobs: list[bytes], device: torch.device, batches: list[int], calls: int,
            threads: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    busy = Busy(device)
    for library in LIBRARIES:
        try:
            out[library] = measure_one(library, blobs, device, busy, batches, calls, threads)
        except Exception as exc:  # noqa: BLE001  (one decoder failing must not lose the others)
            out[library] = {"error": f"{type(exc).__name__}: {exc}"}
        print(library, json.dumps(out[library]), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--video", default=None, help="frames from this video (else synthetic)")
    p.add_argument("--frames", type=int, default=96)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--batches", default="16,48,192")
    p.add_argument("--threads", default="1,2,4")
    p.add_argument("--calls", type=int, default=10)
    args = p.parse_args()
    device = torch.device("cuda")
    if args.video:
        blobs, frames = video_frames(args.video, args.frames, args.quality)
    else:
        blobs, frames = make_frames(args.frames, args.quality)
    results = {"environment": environment(device), "frames": frames,
               "decoders": measure(blobs, device, [int(b) for b in args.batches.split(",")],
                                   args.calls, [int(t) for t in args.threads.split(",")])}
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

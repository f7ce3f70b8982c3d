"""Peak memory of the `serve --ray` ingress while it takes one large `/v1/track` body.

Starts a local Ray cluster with one CPU replica of the default weights, posts SIZE MiB (not a
video: the replica answers 400 `bad_video` once the whole body is in) and prints the ingress
actor's peak resident memory (VmHWM) before and after, and the replica's. Run it in a
loopback-only network namespace (as the Ray tests):

    ip netns add t && ip netns exec t ip link set lo up && \\
      ip netns exec t .venv/bin/python scripts/ray_upload_memory.py --mib 1024; ip netns del t
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import httpx
import ray

from ttball.distributed.archive import _connect
from ttball.distributed.serve import RayServeSettings, start, stop
from ttball.serve import ServeSettings


def peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for {pid}")


def actor_pids() -> dict[str, int]:
    """The deployments' replica processes, by the title Ray gives them."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
        except (OSError, ValueError):
            continue
        for name in ("TTBallIngress", "TTBallWorker"):
            if name in title:
                found[name] = int(proc.name)
    return found


def body(mib: int, rate: float | None):
    """``mib`` MiB, at ``rate`` MiB/s if given (a client on a slower link)."""
    piece, t0 = os.urandom(1 << 20), time.perf_counter()
    for k in range(mib):
        if rate:
            time.sleep(max(0.0, t0 + k / rate - time.perf_counter()))
        yield piece


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=None, help="MiB/s (default: flat out)")
    parser.add_argument("--port", type=int, default=28431)
    args = parser.parse_args()
    _connect(None, num_cpus=2)
    settings = RayServeSettings(
        worker=ServeSettings(device="cpu", port=args.port, warmup_batches=(1,), torch_threads=1,
                             decode_threads=1), replicas=1, cpus_per_replica=1)
    started = start(settings)
    base = f"http://127.0.0.1:{args.port}"
    try:
        while httpx.get(f"{base}/readyz").status_code != 200:
            time.sleep(0.5)
        pids = actor_pids()
        before = {k: round(peak_mib(p)) for k, p in pids.items()}
        t0 = time.perf_counter()
        reply = httpx.post(f"{base}/v1/track", content=body(args.mib, args.rate), timeout=600,
                           headers={"Content-Type": "video/mp4"})
        seconds = time.perf_counter() - t0
        after = {k: round(peak_mib(p)) for k, p in pids.items()}
        print(f"body {args.mib} MiB at {args.rate or 'full'} MiB/s in {seconds:.1f} s: "
              f"{reply.status_code} "
              f"{reply.text.strip()[:120]}")
        for name in sorted(pids):
            print(f"{name}: peak RSS {before[name]} MiB before, {after[name]} MiB after")
    finally:
        stop(settings, started)
        ray.shutdown()


if __name__ == "__main__":
    main()

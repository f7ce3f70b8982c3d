"""The worker's host cost a frame, by thread, with the network taken out: one ``ttball serve
--device-pipeline`` worker in this process (a backend that returns zero logits at once, so
every CPU second left is the worker's own: WebSockets, sessions, batcher, decode, resize,
windows, post-processing, tracking), ``ttball loadtest`` against it in a child process, and
per load the CPU milliseconds a frame of each of the worker's threads (named in the kernel:
``tt-event-loop``, ``tt-backend_0``, ``tt-backend-1_0``, ``tt-decode_N``; scripts/proc_cpu.py)
and the event loop's lag (``ttball_event_loop_lag_seconds``)::

    python scripts/loop_cost.py --clip real_rally_a.mp4 --sessions 4 8 16 --seconds 8 \\
        [--lanes 2] [--no-overlap] [--out loop.json]
    python scripts/loop_cost.py --frame-size 256x144 --size 72x128 --sessions 8 16 32

``--size HxW``: the network's input size (a checkpoint of random weights with that config is
made for the run); ``--frame-size WxH``: without ``--clip``, a drawn clip of frames that size.
Small sizes make the lanes' own work (decode, resize, post-processing on the host here) cheap,
so that what is left is the per-frame cost of the worker's Python, its event loop first.

A replica of ``serve --ray`` runs one such worker. Its event loop and the Python parts of its
lanes share one interpreter lock, so the figures bound what one replica can answer a second
on this host's cores: the loop's ms a frame, plus the lanes' Python, must stay under 1,000 ms
a second. On a CPU the decode, resize and windows run on the host (cv2 and torch ops on CPU
tensors) and cost more than on a GPU, where they are the GPU's; the loop's share is the same
code either way.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import proc_cpu
import serve_push_costs

from ttball.backends import BackendBase
from ttball.serve import ServeSettings, create_app
from ttball.serve.app import serve_in_thread

GROUPS = ("tt-event-loop", "tt-backend", "tt-decode")  # the rest: "other"


class ZeroBackend(BackendBase):
    """Zero logits at once: the network's cost taken out of the worker."""

    name = "zero"

    def __init__(self) -> None:
        super().__init__(torch.device("cpu"))

    def run(self, batch: torch.Tensor) -> torch.Tensor:
        return torch.zeros(batch.shape[0], 3, *batch.shape[2:])


def group_of(comm: str) -> str:
    return next((g for g in GROUPS if comm.startswith(g)), "other")


def cpu_by_group(rows: list[dict[str, Any]], seconds: float) -> dict[str, float]:
    """CPU seconds per thread group of this process, from :func:`proc_cpu.diff` rows (which
    give % of a core over ``seconds``)."""
    out = dict.fromkeys((*GROUPS, "other"), 0.0)
    for row in rows:
        for comm, _, pct in row["top"]:
            out[group_of(comm)] += pct / 100 * seconds
    return out


def lag(metrics: str) -> dict[float | str, float]:
    """``ttball_event_loop_lag_seconds`` of one /metrics text: cumulative bucket counts by
    upper edge, ``"sum"`` and ``"count"`` (serve_push_costs' reading)."""
    return serve_push_costs.histograms(metrics).get("loop_lag", {})


def lag_summary(before: dict[float | str, float], after: dict[float | str, float]) -> dict[str, float]:
    """Mean and p99 (upper bucket edge) of the lag observed between two /metrics reads, ms."""
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    n, total = delta.get("count", 0.0), delta.get("sum", 0.0)
    edges = sorted((le, c) for le, c in delta.items() if isinstance(le, float))
    p99 = next((le for le, c in edges if c >= 0.99 * n), float("inf")) if n else float("nan")
    return {"n": n, "mean_ms": 1e3 * total / n if n else float("nan"), "p99_ms": 1e3 * p99}


def measure(url: str, clip: Path, sessions: int, fps: float, seconds: float,
            work: Path) -> dict[str, Any]:
    import httpx

    metrics_before = lag(httpx.get(f"{url}/metrics").text)
    before = proc_cpu.snapshot(pids=[os.getpid()])
    report = work / f"loadtest-{sessions}.json"
    subprocess.run([sys.executable, "-m", "ttball.cli", "loadtest", url, "--clips", str(clip),
                    "--sessions", str(sessions), "--fps", str(fps), "--step", "3",
                    "--duration", str(seconds), "--max-frames", "120", "--drain-timeout", "8",
                    "--quiet", "--out", str(report)], check=True, cwd=ROOT)
    after = proc_cpu.snapshot(pids=[os.getpid()])
    metrics_after = lag(httpx.get(f"{url}/metrics").text)
    interval = after["time"] - before["time"]
    rows = proc_cpu.diff(before, after, top=10_000)  # every thread
    load = json.loads(report.read_text())
    frames = load["achieved_fps"] * seconds  # rows answered in the sending window
    cpu = cpu_by_group(rows, interval)
    return {"sessions": sessions, "offered_fps": load["offered_fps"],
            "answered_fps": load["achieved_fps"], "p99_ms": load["latency_ms"]["p99"],
            "dropped": load["dropped"], "interval_s": round(interval, 2),
            "cpu_ms_a_frame": {g: round(1e3 * s / frames, 3) if frames else None
                               for g, s in cpu.items()},
            "cpu_pct_of_a_core": {g: round(100 * s / interval, 1) for g, s in cpu.items()},
            "loop_lag": lag_summary(metrics_before, metrics_after)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clip", type=Path, help="a video (the load's frames)")
    parser.add_argument("--frame-size", default="256x144", help="WxH of a drawn clip (no --clip)")
    parser.add_argument("--size", help="HxW: the network's input (a random checkpoint)")
    parser.add_argument("--sessions", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--fps", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--no-overlap", action="store_true")
    parser.add_argument("--weights", default=None, help="checkpoint (default: the bundled one)")
    parser.add_argument("--switch-interval-ms", type=float,
                        help="sys.setswitchinterval: how long a thread that wants the interpreter "
                        "lock waits before asking its holder to drop it (Python's default 5 ms)")
    parser.add_argument("--loop", default="auto", choices=("auto", "asyncio", "uvloop"),
                        help="the worker's event loop (uvicorn's; auto: uvloop where installed)")
    parser.add_argument("--ws", default="auto", choices=("auto", "websockets", "websockets-sansio", "wsproto"),
                        help="uvicorn's WebSocket implementation (auto: websockets' sans-I/O one)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.clip is not None and not args.clip.is_file():
        parser.error(f"--clip {args.clip}: no such file")
    torch.set_num_threads(1)
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1e3)
    tmp = tempfile.TemporaryDirectory()
    try:
        if args.clip is None:
            args.clip = draw_clip(Path(tmp.name) / "clip.mp4", _pair(parser, args.frame_size, "--frame-size"))
        if args.size:
            height, width = _pair(parser, args.size, "--size")
            args.weights = str(random_checkpoint(Path(tmp.name) / "w.safetensors", height, width))
        return run(args)
    finally:
        tmp.cleanup()


def _pair(parser: argparse.ArgumentParser, text: str, flag: str) -> tuple[int, int]:
    try:
        a, b = (int(v) for v in text.lower().split("x"))
    except ValueError:
        parser.error(f"{flag} {text!r}: expected two numbers like 256x144")
    if a < 8 or b < 8:
        parser.error(f"{flag} {text!r}: each side at least 8")
    return a, b


def draw_clip(path: Path, size: tuple[int, int], frames: int = 120) -> Path:
    """A clip of ``size`` (W, H): a white ball crossing a dark table, 60 fps."""
    import cv2
    import numpy as np

    w, h = size
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 60, (w, h))
    for i in range(frames):
        img = np.full((h, w, 3), 40, np.uint8)
        cv2.circle(img, (int(w * (i % 60) / 60), h // 2), max(2, h // 40), (255, 255, 255), -1)
        writer.write(img)
    writer.release()
    return path


def random_checkpoint(path: Path, height: int, width: int) -> Path:
    """BlurBall with its initial weights and an input of ``height`` × ``width`` (the zero
    backend never runs it: only the config matters)."""
    from ttball.model import BlurBall, save_checkpoint
    from ttball.model.config import WeightsConfig

    save_checkpoint(path, BlurBall().eval(), WeightsConfig(name=f"random-{height}x{width}",
                                                           input_height=height, input_width=width))
    return path


def run(args: argparse.Namespace) -> int:
    settings = ServeSettings(**{**({"weights": args.weights} if args.weights else {}),
                                "device": "cpu", "torch_threads": 1,
                                "warmup_batches": (1, 2, 4, 8, 16),
                                "device_pipeline": True, "pipeline_lanes": args.lanes,
                                "pipeline_overlap": not args.no_overlap,
                                "backend_factory": lambda model, device: ZeroBackend()})
    results = []
    with tempfile.TemporaryDirectory() as tmp, serve_in_thread(create_app(settings), loop=args.loop, ws=args.ws) as url:
        import httpx

        deadline = time.monotonic() + 300
        while not httpx.get(f"{url}/readyz").json().get("ready"):
            if time.monotonic() > deadline:
                print("loop_cost: the worker was not ready in 300 s", file=sys.stderr)
                return 1
            time.sleep(0.2)
        event_loop = httpx.get(f"{url}/readyz").json().get("event_loop")
        print(f"the worker's event loop: {event_loop}", flush=True)
        for n in args.sessions:
            r = measure(url, args.clip, n, args.fps, args.seconds, Path(tmp))
            results.append(r)
            ms, lag_ = r["cpu_ms_a_frame"], r["loop_lag"]
            print(f"{n:4d} sessions: {r['answered_fps']:7.1f} of {r['offered_fps']:.0f} frames/s, "
                  f"p99 {r['p99_ms']:.1f} ms; CPU ms a frame: "
                  + ", ".join(f"{g} {v}" for g, v in ms.items())
                  + f"; loop lag mean {lag_['mean_ms']:.2f} ms, p99 {lag_['p99_ms']:.1f} ms",
                  flush=True)
    if args.out:
        args.out.write_text(json.dumps({"lanes": args.lanes, "overlap": not args.no_overlap,
                                        "switch_interval_ms": sys.getswitchinterval() * 1e3,
                                        "loop": args.loop, "event_loop": event_loop, "ws": args.ws,
                                        "torch": torch.__version__, "cores": os.cpu_count(),
                                        "runs": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

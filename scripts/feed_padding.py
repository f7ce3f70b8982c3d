"""How the e2e scripts' feed fills the backend's calls, on the CPU (no GPU needed): per
``SESSIONSxBATCH`` row, the windows each push makes once warm, and the share of the calls'
slots that are padding, with the sessions' window phases staggered (the scripts' default) and
aligned (``--aligned-phases``). The network is the eager model at a tiny input size: the
windows and calls depend on the feed and the pipeline's batching, not on the network.

    PYTHONPATH=. python3 scripts/feed_padding.py --rows 50x16,200x32 --pushes 60
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from gpu_e2e import JpegDecoder, StageTimer, feed, load_weights, make_frames, open_pipeline

from ttball.backends import create


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="50x16,200x32", help="SESSIONSxBATCH, comma-separated")
    parser.add_argument("--pushes", type=int, default=60)
    parser.add_argument("--frames", type=int, default=12, help="distinct JPEG frames")
    args = parser.parse_args()
    try:
        rows = [tuple(int(v) for v in row.split("x")) for row in args.rows.split(",")]
    except ValueError:
        parser.error(f"--rows {args.rows!r}: SESSIONSxBATCH, comma-separated (e.g. 50x16)")
    if any(len(row) != 2 or min(row) < 1 for row in rows):
        parser.error(f"--rows {args.rows!r}: SESSIONSxBATCH, both positive")
    torch.set_num_threads(1)
    model = load_weights(None, "72x128")
    device = torch.device("cpu")
    backend = create("eager-fp32", model, device)
    blobs, _ = make_frames(args.frames, 90)
    for sessions, batch in rows:
        for stagger in (True, False):
            pipeline, per_push = open_pipeline(
                backend, model.config, sessions, batch, 3, JpegDecoder(device),
                StageTimer(device), blobs=blobs if stagger else None)
            calls: list[tuple[int, int]] = []
            pipeline.on_batch = lambda windows, size, calls=calls: calls.append((windows, size))
            per = []
            for p in range(args.pushes):
                before = len(calls)
                pipeline.push(feed(blobs, sessions, per_push, p * per_push))
                per.append(sum(w for w, _ in calls[before:]))
            warm = calls[len(calls) // 4:]  # the first quarter's calls left out
            windows, slots = sum(w for w, _ in warm), sum(s for _, s in warm)
            print(f"{sessions} sessions x {batch}, {'staggered' if stagger else 'aligned'}: "
                  f"windows a push {per[args.pushes // 4:args.pushes // 4 + 12]} …, "
                  f"padded {100 * (slots - windows) / slots:.1f} % of {slots} slots", flush=True)


if __name__ == "__main__":
    main()

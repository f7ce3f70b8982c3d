"""The overlay's two encoders on one video (ttball.overlay: H.264 by PyAV, MPEG-4 Part 2 by
OpenCV): frames a second of encoding alone (the frames decoded first) and the file's size.
Runs on the CPU.

    PYTHONPATH=. python scripts/overlay_encode_rate.py ../shared/data/real_rally_a.mp4
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import cv2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttball.frames import FrameSource
from ttball.overlay import _open


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("video")
    args = parser.parse_args()
    src = FrameSource(args.video)
    frames = [cv2.cvtColor(f.rgb, cv2.COLOR_RGB2BGR) for f in src]
    info = src.info
    with tempfile.TemporaryDirectory() as tmp:
        for codec in ("h264", "mpeg4"):
            path = Path(tmp) / f"{codec}.mp4"
            start = time.perf_counter()
            writer = _open(path, info.fps, info.width, info.height, codec)
            for bgr in frames:
                writer.write(bgr)
            writer.close()
            seconds = time.perf_counter() - start
            print(f"{codec}: {len(frames)} frames of {info.width}x{info.height}, "
                  f"{len(frames) / seconds:.1f} frames/s, {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()

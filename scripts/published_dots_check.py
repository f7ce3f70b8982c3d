#!/usr/bin/env python3
"""Rough check of ``track.csv`` files against the green dots drawn into a video.

The real rally in ``shared/data/`` carries the published model's past detections as green dots.
Each dot that appears in frame i (not within 4 px of a dot of frame i-1) is matched to our
detection in frame i-1 or i; a match within 8 px counts as a hit.

Usage: published_dots_check.py VIDEO TRACK.csv [TRACK.csv ...]
"""

from __future__ import annotations

import csv
import sys

import cv2
import numpy as np

MATCH_PX = 8.0
NEW_DOT_PX = 4.0


def green_dots(video: str) -> list[np.ndarray]:
    """Per frame, the centres of small saturated-green blobs, ``(n, 2)`` as (x, y)."""
    cap = cv2.VideoCapture(video)
    frames = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        b, g, r = (frame[..., k].astype(int) for k in range(3))
        mask = ((g > 180) & (r < 120) & (b < 120)).astype(np.uint8)
        n, _, stats, centres = cv2.connectedComponentsWithStats(mask, connectivity=8)
        keep = [k for k in range(1, n) if 3 <= stats[k, cv2.CC_STAT_AREA] <= 80]
        frames.append(centres[keep].reshape(-1, 2))
    return frames


def new_dots(frames: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Dots that were not already drawn in the previous frame, by frame index."""
    found = {}
    for i in range(1, len(frames)):
        old = frames[i - 1]
        fresh = [p for p in frames[i]
                 if len(old) == 0 or np.hypot(*(old - p).T).min() > NEW_DOT_PX]
        if fresh:
            found[i] = np.array(fresh)
    return found


def check(track_csv: str, dots: dict[int, np.ndarray]) -> str:
    with open(track_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    distances = []
    for i, points in dots.items():
        ours = [(float(rows[j]["x"]), float(rows[j]["y"])) for j in (i - 1, i)
                if 0 <= j < len(rows) and rows[j]["visible"] == "1"]
        distances.append(min((np.hypot(x - px, y - py) for x, y in ours for px, py in points),
                             default=np.inf))
    d = np.array(distances)
    visible = sum(r["visible"] == "1" for r in rows)
    median = f"{np.median(d[np.isfinite(d)]):.1f} px" if np.isfinite(d).any() else "-"
    return (f"{track_csv}: visible {visible}, matched new dots (<= {MATCH_PX:g} px) "
            f"{int((d <= MATCH_PX).sum())} of {len(dots)}, median distance {median}")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    dots = new_dots(green_dots(argv[0]))
    print(f"frames with a new dot: {len(dots)}")
    for name in argv[1:]:
        print(check(name, dots))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Each run's time to ready and, per replica, which warm-up sizes it tuned and which it took
from a tuning record: `python ready.py RUN/ray/ready-8.json...` (gpu_ray_loadtest.sh's files)."""

import json
import sys
from pathlib import Path

for path in sys.argv[1:]:
    try:
        r = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        print(path, "unreadable:", exc)
        continue
    print(path, "ready in", r.get("time_to_ready_s"), "s")
    for rep in r.get("replicas", []):
        w = rep.get("warmup") or {}
        print(" ", rep.get("replica"), "tuning", w.get("tuning"), "warm-up s", w.get("seconds"),
              "start-up", rep.get("startup_seconds"),
              *(("decoder start", rep["decoder_start"]) if rep.get("decoder_start") else ()))

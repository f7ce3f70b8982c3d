"""The resize stage of scripts/gpu_e2e.py, a line a path: µs a frame by wall clock, and by the
GPU's work alone where the stage timed it (forty-fifth session), with its checks.
Usage: python3 summary.py RESIZE_JSON (run.sh and ../../h200-2026-12-05c/call3.sh)."""
import json
import sys
from pathlib import Path

r = json.loads(Path(sys.argv[1]).read_text()).get("resize", {})
n = r.get("batch", 48)
for key, v in r.items():
    if isinstance(v, dict) and "ms_per_call" in v:
        gpu = f", GPU alone {v['gpu_us_per_item']:.2f}" if "gpu_us_per_item" in v else ""
        extra = {k: v[k] for k in ("bit_exact_vs_cv2", "list_equal", "equal_cpu", "running",
                                   "compile_error", "error", "first_call_s") if k in v}
        print(f"{key:16} wall {1e3 * v['ms_per_call'] / n:.2f} us a frame{gpu}", extra)

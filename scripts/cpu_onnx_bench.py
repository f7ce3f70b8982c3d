"""CPU backends side by side at full size: eager FP32, ONNX Runtime (default, tuned, INT8) and
OpenVINO (FP32, BF16, INT8) on one window (1, 9, 288, 512), interleaved round-robin so that load
from other processes hits every variant alike.

Timing: wall time of ``backend(window)`` (input already a CPU float32 tensor; includes the
numpy round trip of the ONNX backends, excludes decoding and preprocessing), median over
``--runs`` rounds after ``--warmup`` calls each; also the process CPU seconds per call (all
threads), which other processes' load inflates less than wall time. Accuracy: every variant against eager FP32 on
held-out windows of ``--clip`` (or seeded random windows without it): max |Δ logits| and how many
of the heatmaps keep eager's argmax pixel. INT8 is calibrated on other windows of the same clip.

    PYTHONPATH=. .venv/bin/python scripts/cpu_onnx_bench.py \\
        --clip /work/shared/data/real_rally_a.mp4 --out bench-cpu-onnx.json
    # which ONNX Runtime session settings are fastest here:
    PYTHONPATH=. .venv/bin/python scripts/cpu_onnx_bench.py --explore-ort
    # INT8 calibration methods compared on the clip:
    PYTHONPATH=. .venv/bin/python scripts/cpu_onnx_bench.py --clip CLIP --calibration
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ttball.backends import create, unavailable_reason
from ttball.backends import onnxrt as _onnxrt  # noqa: F401  (registers onnxrt-*)
from ttball.backends import openvino as _openvino  # noqa: F401  (registers openvino-*)
from ttball.model import BlurBall, randomize_batchnorm

H, W = 288, 512
SPIN_OFF = {"session.intra_op.allow_spinning": "0"}
MAIN = ["eager-fp32", "onnxrt-fp32", "onnxrt-fp32-tuned", "onnxrt-int8",
        "openvino-fp32", "openvino-bf16", "openvino-int8"]
ORT_VARIANTS: dict[str, dict[str, Any]] = {
    "ort default (all, spin)": {},
    "ort all, no spin": {"config": SPIN_OFF},
    "ort extended (no NCHWc), no spin": {"graph_optimization_level": "extended", "config": SPIN_OFF},
    "ort all, 1 thread": {"intra_op_threads": 1},
    "ort all, parallel 2x1, no spin": {"execution_mode": "parallel", "inter_op_threads": 2,
                                       "intra_op_threads": 1, "config": SPIN_OFF},
    "ort all, no spin, denormals zero": {"config": {**SPIN_OFF,
                                                    "session.set_denormal_as_zero": "1"}},
}


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor()
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines()
                 if ln.startswith("Model name")), platform.processor())


def versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    found = {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
             "onnx": onnx.__version__, "numpy": np.__version__}
    try:
        import openvino

        found["openvino"] = openvino.get_version()
    except ImportError:
        pass
    return found


def load(weights: str | None) -> BlurBall:
    if weights is None:
        torch.manual_seed(0)
        return randomize_batchnorm(BlurBall(), seed=0).eval()
    from ttball.model import load_model

    return load_model(None if weights == "default" else weights)


def windows_of(clip: Path | None, model: BlurBall) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(calibration, evaluation) windows: alternate windows of the clip, or random ones."""
    if clip is None:
        rng = np.random.default_rng(0)
        make = lambda: rng.standard_normal((1, 9, H, W), dtype=np.float32)
        return [make() for _ in range(8)], [make() for _ in range(4)]
    from ttball.export.quantize import clip_windows

    every = list(clip_windows(clip, model.config, H, W))
    return every[0::2][:16], every[1::2]


def accuracy(run: Callable[[torch.Tensor], torch.Tensor], windows: list[np.ndarray],
             refs: list[np.ndarray], threshold: float = 0.5) -> dict[str, Any]:
    """Against eager's logits: max |Δ|; heatmaps with the same argmax pixel; with the same
    visibility (peak sigmoid above ``threshold``); of the heatmaps eager calls visible, those
    whose peak the variant puts within 4 px of eager's (the published match radius); and
    ``peak_gap``, the largest drop in eager's logit between its own peak and the pixel the
    variant picked (small: the two pixels were a near-tie in eager's heatmap)."""
    cut = float(np.log(threshold / (1 - threshold)))
    worst, gap, same, visible, near, shown = 0.0, 0.0, 0, 0, 0, 0
    for w, ref in zip(windows, refs):
        out = run(torch.from_numpy(w)).numpy()
        worst = max(worst, float(np.abs(out - ref).max()))
        flat_o, flat_r = out.reshape(3, -1), ref.reshape(3, -1)
        picked, best = flat_o.argmax(1), flat_r.argmax(1)
        same += int((picked == best).sum())
        gap = max(gap, float((flat_r.max(1) - flat_r[np.arange(3), picked]).max()))
        seen_o, seen_r = flat_o.max(1) > cut, flat_r.max(1) > cut
        visible += int((seen_o == seen_r).sum())
        dist = np.hypot(*np.subtract(np.unravel_index(picked, ref.shape[2:]),
                                     np.unravel_index(best, ref.shape[2:])))
        shown += int(seen_r.sum())
        near += int((seen_r & seen_o & (dist <= 4)).sum())
    n = 3 * len(windows)
    return {"max_abs_diff": worst, "argmax_same": f"{same}/{n}", "peak_gap": gap,
            "visibility_same": f"{visible}/{n}", "visible_within_4px": f"{near}/{shown}"}


def timings(runs: dict[str, Callable[[torch.Tensor], Any]], x: torch.Tensor, rounds: int,
            warmup: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall seconds and process CPU seconds (all threads) per call, round-robin."""
    for run in runs.values():
        for _ in range(warmup):
            run(x)
    wall: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            run(x)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return wall, cpu


def build(names: dict[str, tuple[str, dict[str, Any]]], model: BlurBall, cache: Path,
          calib: list[np.ndarray], threads: int = 0) -> dict[str, Any]:
    built = {}
    for label, (name, options) in names.items():
        if threads and name.startswith("onnxrt"):
            options = {"intra_op_threads": threads, **options}
        elif threads and name.startswith("openvino"):
            options = {"threads": threads, **options}
        reason = unavailable_reason(name, "cpu")
        if reason:
            print(f"skip {label}: {reason}")
            continue
        extra = {"windows": calib} if name.endswith("int8") else {}
        start = time.perf_counter()
        backend = create(name, model, "cpu", **({} if name == "eager-fp32" else
                                                 {"cache_dir": cache}), **extra, **options)
        backend(torch.zeros(1, 9, H, W))
        backend.first_call_s = time.perf_counter() - start  # export/calibration/compile
        print(f"built {label} in {backend.first_call_s:.1f} s", flush=True)
        built[label] = backend
    return built


def table(rows: list[dict[str, Any]]) -> str:
    header = ("| variant | median s/window | min s | CPU s | speed-up vs eager "
              "| max abs Δ vs eager | argmax same | peak gap | visibility same "
              "| visible, peak within 4 px |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['median_s']:.3f} | {r['min_s']:.3f} | "
                     f"{r['cpu_s']:.3f} | "
                     f"{r['speedup']:.1f}× | {r.get('max_abs_diff', 0):.2e} | "
                     f"{r.get('argmax_same', '')} | {r.get('peak_gap', 0):.2e} | "
                     f"{r.get('visibility_same', '')} | {r.get('visible_within_4px', '')} |")
    return "\n".join(lines)


def compare_calibration(model: BlurBall, calib: list[np.ndarray], held: list[np.ndarray],
                        refs: list[np.ndarray], cache: Path) -> list[dict[str, Any]]:
    from ttball.export.cache import cached_onnx
    from ttball.export.quantize import METHODS

    cached_onnx(model, height=H, width=W, cache_dir=cache)  # FP32 export out of the timing
    rows = []
    for method in METHODS:
        start = time.perf_counter()
        backend = create("onnxrt-int8", model, "cpu", cache_dir=cache, windows=calib,
                         method=method)
        backend(torch.from_numpy(held[0]))  # calibrates and quantises on first use
        took = time.perf_counter() - start
        row = {"method": method, "calibration_s": took,
               **accuracy(backend, held, refs, model.config.score_threshold)}
        diffs = [np.abs(backend(torch.from_numpy(w)).numpy() - r).mean()
                 for w, r in zip(held, refs)]
        row["mean_abs_diff"] = float(np.mean(diffs))
        print(row, flush=True)
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clip", type=Path, help="real footage for INT8 calibration and accuracy")
    p.add_argument("--runs", type=int, default=9, help="timed rounds (default 9)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", type=Path, help="write rows and environment as JSON")
    p.add_argument("--explore-ort", action="store_true", help="time ORT session settings")
    p.add_argument("--calibration", action="store_true", help="compare INT8 calibration methods")
    p.add_argument("--cache-dir", type=Path, help="export cache (default: a temporary folder)")
    p.add_argument("--weights", help="checkpoint, or 'default' for the shipped weights "
                   "(default: random weights with randomize_batchnorm, seed 0)")
    p.add_argument("--threads", type=int, default=0,
                   help="threads for every variant (torch, ORT intra-op, OpenVINO); default: "
                   "each runtime's own choice (one per core)")
    args = p.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    model = load(args.weights)
    calib, held = windows_of(args.clip, model)
    with torch.inference_mode():
        refs = [model(torch.from_numpy(w))[0].numpy() for w in held]
    env = {"date": dt.date.today().isoformat(), "cpu": cpu_name(), "cores": os.cpu_count(),
           "weights": f"{model.config.name} {model.config.sha256[:12]}" if args.weights
           else "random, randomize_batchnorm(seed=0)",
           "torch_threads": torch.get_num_threads(), **versions(),
           "loadavg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache_dir or Path(tmp)
        if args.calibration:
            rows = compare_calibration(model, calib, held, refs, cache)
        else:
            if args.explore_ort:
                names = {"eager-fp32": ("eager-fp32", {})} | {
                    k: ("onnxrt-fp32", v) for k, v in ORT_VARIANTS.items()}
            else:
                names = {n: (n, {}) for n in MAIN}
            built = build(names, model, cache, calib, args.threads)
            x = torch.from_numpy(held[0])
            times, cpu = timings(built, x, args.runs, args.warmup)
            eager = float(np.median(times["eager-fp32"]))
            rows = []
            for label, backend in built.items():
                med = float(np.median(times[label]))
                rows.append({"variant": label, "median_s": med, "min_s": min(times[label]),
                             "max_s": max(times[label]), "speedup": eager / med,
                             "cpu_s": float(np.median(cpu[label])),
                             "first_call_s": backend.first_call_s,
                             **accuracy(backend, held, refs, model.config.score_threshold)})
            print(table(rows))
    env["loadavg_after"] = os.getloadavg()
    print(json.dumps(env))
    if args.out:
        args.out.write_text(json.dumps({"environment": env, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()

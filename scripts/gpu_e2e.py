"""End to end on one GPU (issue 9's last target): JPEG bytes → tracked positions for S
concurrent sessions through :class:`ttball.kernels.prepost.GpuPipeline`.

Stages (each guarded: a failure is recorded in the JSON and the run goes on; no new stage or
row starts after ``--budget-s``; the JSON is rewritten after every stage):

1. ``frames``: N synthetic 1280×720 frames (``ttball.synth``, else drawn), JPEG-encoded.
2. ``decode``: nvJPEG batched decode (torchvision, when importable) and ``cv2.imdecode`` (one
   thread, and a pool of every core) in frames/s; nvJPEG's pixels against cv2's.
3. ``resize``: the device resize (eager and ``torch.compile``d) in frames/s; bit-exactness
   against ``cv2.resize`` on the same decoded frames.
4. ``backend``: build ``--backend`` around the default weights, warm ``--batches``.
   ``network``: the backend alone at each of ``--batches`` in this process: ms a call, and its
   kernels' device time a call under the profiler (to set against ``profile``'s kernels a
   push).
5. ``post``: device post-processing of real heatmaps of these frames, eager vs CUDA graph;
   share of heatmaps needing the host fallback.
6. ``e2e``: per batch size B, S sessions send frames round-robin, 3·B frames (step 3) per
   push, their window phases staggered (``--aligned-phases``: in phase, so windows come in
   bursts, as before the twentieth session): frames/s, per-push latency p50/p99 (bytes in →
   rows on the host), and a second pass with a device sync after each stage for the split
   (decode, preprocess, network, postprocess, track) in µs per frame.
7. ``e2e_cpu_decode``: the largest B with ``cv2`` decode on the host instead of nvJPEG.
8. ``cpu_path``: today's worker path (cv2 decode + cv2 resize on the host, FrameStream,
   ``infer_windows``, host post-processing), one thread, the largest B.
9. ``parity``: GpuPipeline rows vs the CPU path (same backend) on two sessions: visibility
   flips and position differences, with the pipeline's decoder and with cv2 decode.
10. ``profile``: a few pushes, serial and overlapped, under ``torch.profiler``: per push, the
   host time of each stage and the part of it spent in calls that wait for the device
   (stream, event and device synchronizations, blocking copies), and the top host ops and
   device kernels. With ``--trace DIR`` also a Chrome trace of each.

Timing is wall clock around whole pushes (the pipeline synchronises at its end: rows are on
the host); warm-up pushes are excluded. Nothing overlaps host and device work across pushes.

    PYTHONPATH=. python scripts/gpu_e2e.py --out e2e.json [--backend triton-fp16]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _stages import Budget, run_stages

from ttball.backends import create
from ttball.frames import Frame, normalize, normalizer
from ttball.kernels.prepost import (
    DECODERS,
    GpuPipeline,
    GraphedStats,
    JpegDecoder,
    Resizer,
    StageTimer,
    decode_cv2,
    gpu_jpeg_reason,
    packed_stats,
)
from ttball.kernels.prepost_image import RESIZE_MODES
from ttball.model import load_model
from ttball.model.config import WeightsConfig
from ttball.pipeline import infer_windows
from ttball.results import FrameResult
from ttball.stream import FrameStream, StreamOptions

STAGES = ("frames", "backend", "network", "decode", "post", "e2e", "e2e_overlap", "e2e_cpu_decode", "cpu_path",
          "parity", "resize", "profile")
# Batch sizes warmed besides --batches; a push's last windows are padded to the next of these.
# Until the nineteenth session only 8 (triton-fp16 compiled each size, 8 s at batch 8 with an
# empty cache): its profile then had 1.5 backend calls a push of 32 windows on average, a push
# of 33-34 making a call of 32 and one of 1-2 windows padded to 8 (2.2 ms of the GPU's 17.6 a
# push). The direct backend tunes a size in seconds, so the small sizes of GpuPipeline's
# default (DEFAULT_BATCH_SIZES) and of the worker's documented --warmup-batches are warmed too.
WARM_SIZES = (1, 2, 4, 8)
PARITY_BATCH = 8


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def rate(fn: Callable[[], Any], items: int, min_s: float = 1.0) -> dict[str, float]:
    """Items/s of ``fn`` (each call handles ``items``), after one warm-up call."""
    fn()
    sync()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_s or calls < 3:
        fn()
        calls += 1
    sync()
    seconds = time.perf_counter() - start
    return {"per_s": calls * items / seconds, "ms_per_call": 1e3 * seconds / calls, "calls": calls}


def gpu_rate(fn: Callable[[], Any], items: int, calls: int = 20) -> dict[str, float]:
    """``fn``'s GPU time alone (CUDA): ``calls`` calls queued behind a ~0.1 s sleep kernel, so
    that the host has issued them all before the GPU reaches the first; the events between
    them then time the GPU's work, not the host's launches (compare :func:`rate`'s wall time:
    the larger of the two)."""
    fn()
    sync()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(200_000_000)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end) / calls
    return {"gpu_ms_per_call": ms, "gpu_us_per_item": 1e3 * ms / items}


def environment(device: torch.device) -> dict[str, Any]:
    try:
        import torchvision

        tv = torchvision.__version__
    except Exception as exc:  # noqa: BLE001
        tv = f"not importable: {type(exc).__name__}: {exc}"
    return {
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "none (CPU)",
        "torchvision": tv, "nvjpeg": gpu_jpeg_reason(device) or "available",
        "opencv": cv2.__version__, "cpu_count": os.cpu_count(), "command": " ".join(sys.argv),
    }


# --- stages ------------------------------------------------------------------------------------
def make_frames(count: int, quality: int) -> tuple[list[bytes], dict[str, Any]]:
    source = "ttball.synth"
    try:
        from ttball.synth import ClipConfig, generate_clip

        frames, _ = generate_clip(2026, ClipConfig(size=(1280, 720), fps=60.0, frames=count))
        bgr = list(frames)
    except Exception as exc:  # noqa: BLE001  (drawn frames are good enough for speed)
        source = f"drawn ({type(exc).__name__}: {exc})"
        bgr = []
        for i in range(count):
            img = np.full((720, 1280, 3), (40, 90, 30), np.uint8)
            img += np.random.default_rng(i).integers(0, 12, img.shape, dtype=np.uint8)
            cv2.circle(img, (40 + i * 9 % 1200, 360 + round(200 * np.sin(i / 5))), 6,
                       (255, 255, 255), -1)
            bgr.append(img)
    blobs = [cv2.imencode(".jpg", f, [cv2.IMWRITE_JPEG_QUALITY, quality])[1].tobytes() for f in bgr]
    sizes = [len(b) for b in blobs]
    return blobs, {"source": source, "count": count, "quality": quality,
                   "jpeg_kb_mean": statistics.mean(sizes) / 1e3, "jpeg_kb_max": max(sizes) / 1e3}


def stage_decode(blobs: list[bytes], device: torch.device, batch: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    chunk = (blobs * (batch // len(blobs) + 1))[:batch]
    out["cv2_1_thread"] = rate(lambda: [decode_cv2(b) for b in chunk[:16]], 16)
    threads = os.cpu_count() or 1
    with ThreadPoolExecutor(threads) as pool:
        out[f"cv2_{threads}_threads"] = rate(lambda: list(pool.map(decode_cv2, chunk)), len(chunk))
    decoder = JpegDecoder(device)
    out["gpu_decoder"] = decoder.kind if decoder.kind == "nvjpeg" else f"cv2 ({decoder.gpu_reason})"
    if decoder.kind == "nvjpeg":
        out[f"nvjpeg_batch_{batch}"] = rate(lambda: decoder(chunk), len(chunk))
        out["nvjpeg_batch_16"] = rate(lambda: decoder(chunk[:16]), 16)
        diffs = [(g.cpu().int() - decode_cv2(b).int()).abs() for g, b in zip(decoder(blobs[:8]), blobs)]
        d = torch.stack(diffs).float()
        out["nvjpeg_vs_cv2_pixels"] = {"max": float(d.max()), "mean": float(d.mean()),
                                       "share_differing": float((d > 0).float().mean())}
    nvimg = JpegDecoder(device, library="nvimgcodec")
    out["nvimgcodec"] = "available" if nvimg.kind == "nvimgcodec" else nvimg.gpu_reason
    if nvimg.kind == "nvimgcodec":  # its rate counts the decode to the end (a sync in `rate`)
        out[f"nvimgcodec_batch_{batch}"] = rate(lambda: nvimg(chunk), len(chunk))
        out["nvimgcodec_batch_16"] = rate(lambda: nvimg(chunk[:16]), 16)
        d = torch.stack([(g.cpu().int() - decode_cv2(b).int()).abs()
                         for g, b in zip(nvimg(blobs[:8]), blobs)]).float()
        out["nvimgcodec_vs_cv2_pixels"] = {"max": float(d.max()), "mean": float(d.mean()),
                                           "share_differing": float((d > 0).float().mean())}
        # host time of one call: what the backend thread pays (the decode itself is queued)
        start = time.perf_counter()
        nvimg(chunk)
        out[f"nvimgcodec_host_ms_batch_{batch}"] = 1e3 * (time.perf_counter() - start)
        sync()
    return out


def stage_resize(blobs: list[bytes], device: torch.device, config: WeightsConfig,
                 batch: int, budget: Budget) -> dict[str, Any]:
    """Each resize mode on a stacked batch, and the serving path's list of frames (two runs,
    as two decode children copy them out): ``*_list`` stacks it first (eager, compiled) or
    reads it in place (the Triton kernel); then the normalisation of their windows, eager
    and as the lookup kernel (rates in frames: ``batch`` frames a call)."""
    frames = [decode_cv2(b) for b in blobs[: min(len(blobs), batch)]]
    stacked = torch.stack(frames).to(device)
    stacked = stacked.repeat(batch // len(frames) + 1, 1, 1, 1)[:batch].contiguous()
    half = batch // 2
    listed = [*stacked[:half].clone().unbind(0), *stacked[half:].clone().unbind(0)]
    out: dict[str, Any] = {"batch": batch}
    for label, mode in (("eager", "eager"), ("compiled", "compile"), ("triton", "triton")):
        if budget.left() < (40 if mode == "compile" else 5):
            out[label] = {"skipped": "time budget"}
            continue
        resizer = Resizer(config.input_height, config.input_width, mode=mode)
        start = time.perf_counter()
        small = resizer(stacked)
        sync()
        first_s = time.perf_counter() - start
        want = [cv2.resize(f.permute(1, 2, 0).numpy(), (config.input_width, config.input_height),
                           interpolation=cv2.INTER_LINEAR) for f in frames[:4]]
        exact = all(torch.equal(s.permute(1, 2, 0).cpu(), torch.from_numpy(w))
                    for s, w in zip(small, want))
        exact_list = torch.equal(resizer(listed), small)
        out[label] = {**rate(lambda r=resizer: r(stacked), batch), "first_call_s": first_s,
                      "bit_exact_vs_cv2": exact, "list_equal": exact_list,
                      "running": resizer.running, "compile_error": resizer.compile_error}
        out[f"{label}_list"] = rate(lambda r=resizer: r(listed), batch)
        if device.type == "cuda":  # the forty-fourth session's list miss: host or GPU time?
            out[label].update(gpu_rate(lambda r=resizer: r(stacked), batch))
            out[f"{label}_list"].update(gpu_rate(lambda r=resizer: r(listed), batch))
    from ttball.kernels.prepost_pixels import Normalizer, runs

    out["runs_host"] = rate(lambda: runs(listed), batch)  # finding the runs alone, on the host
    # the windows of those frames normalised: eager torch ops against the lookup kernel
    windows = Resizer(config.input_height, config.input_width)(stacked)[: batch // 3 * 3]
    windows = windows.reshape(-1, 9, config.input_height, config.input_width)
    eager, kernel = normalizer(config, device), Normalizer(config, device)
    want = normalize(windows.cpu(), config)
    out["normalize_eager"] = {**rate(lambda: eager(windows), batch),
                              "equal_cpu": torch.equal(eager(windows).cpu(), want)}
    out["normalize_triton"] = {**rate(lambda: kernel(windows), batch),
                               "equal_cpu": torch.equal(kernel(windows).cpu(), want),
                               "running": kernel.running, "error": kernel.error}
    return out


def stage_post(backend: Any, blobs: list[bytes], config: WeightsConfig, device: torch.device,
               batch: int) -> dict[str, Any]:
    resizer = Resizer(config.input_height, config.input_width)
    frames = torch.stack([decode_cv2(b) for b in (blobs * 3)[: 3 * batch]]).to(device)
    x = normalize(resizer(frames).view(batch, 9, config.input_height, config.input_width), config)
    logits = backend(x)
    thr = torch.full((3 * batch,), config.score_threshold, device=device)
    out: dict[str, Any] = {"batch_windows": batch, "heatmaps": 3 * batch}
    packed = packed_stats(logits, thr)
    out["fallback_share"] = float(packed[:, -1].mean())
    out["eager"] = rate(lambda: packed_stats(logits, thr).cpu(), 3 * batch)
    if device.type != "cuda":
        return out
    graphed = GraphedStats()
    out["graphed"] = rate(lambda: graphed(logits, thr).cpu(), 3 * batch)
    out["graphed_equal_eager"] = bool(torch.equal(graphed(logits, thr), packed_stats(logits, thr)))
    out["bytes_to_host_per_heatmap"] = packed.shape[1] * packed.element_size()
    return out


def feed(blobs: list[bytes], sessions: int, step_frames: int, offset: int) -> list[tuple[str, bytes]]:
    """One push: ``step_frames`` frames, one per session in turn; session s plays the clip
    from frame 7·s, so neighbours differ and no frame repeats its predecessor."""
    out = []
    for k in range(step_frames):
        n = offset + k
        s, t = n % sessions, n // sessions
        out.append((f"s{s}", _frame(blobs, s, t)))
    return out


def _frame(blobs: list[bytes], session: int, t: int) -> bytes:
    """Session ``session``'s frame at time ``t`` of :func:`feed`'s sequence."""
    return blobs[(7 * session + t) % len(blobs)]


def open_pipeline(backend: Any, config: WeightsConfig, sessions: int, batch: int, step: int,
                  decoder: JpegDecoder, timer: StageTimer, *, blobs: list[bytes] | None = None,
                  **options: Any) -> tuple[GpuPipeline, int]:
    """A pipeline warmed for ``batch`` windows with ``sessions`` open, and the frames per push
    that make about ``batch`` windows.

    With ``blobs`` (and step 3) the sessions' window phases are staggered first, as cameras
    that joined at different times: sessions ``s % 3 == 1`` get one frame, ``s % 3 == 2``
    two (of :func:`feed`'s sequence, so none repeats the next). Fed round-robin from the same
    start, every session would complete its windows on the same pushes: bursts of two or three
    backend calls, then pushes with none (5–7 % of the slots padded, and the pushes' p99 set
    by the bursts)."""
    sizes = [s for s in WARM_SIZES if s < batch] + [batch]
    pipeline = GpuPipeline(backend, config, decoder=decoder, batch_sizes=sizes, timer=timer,
                           **options)
    for s in range(sessions):
        pipeline.open(f"s{s}", StreamOptions(step=step), fps=60.0)
    if blobs and step == 3:  # the frames feed() would have sent at times -2 and -1: each
        for t in (-2, -1):   # differs from the next (a repeat would be dropped as a duplicate)
            pipeline.push([(f"s{s}", _frame(blobs, s, t)) for s in range(sessions)
                           if s % 3 >= -t])
    return pipeline, batch * step if step == 3 else batch


def load_weights(weights: str | None, input_size: str | None) -> Any:
    """The model of ``--weights`` (default: the packaged ones) on the CPU, its input size set
    to ``--input-size`` (``HxW``) when given."""
    model = load_model(weights, device="cpu")
    if input_size:
        h, w = (int(v) for v in input_size.split("x"))
        model.config = model.config.evolve(input_height=h, input_width=w)
    return model


def run_e2e(backend: Any, config: WeightsConfig, blobs: list[bytes], sessions: int, batch: int,
            step: int, seconds: float, decoder: JpegDecoder, sync_stages: bool,
            warm_pushes: int = 3, overlap: bool = False,
            resize: str = "eager", stagger: bool = True) -> dict[str, Any]:
    device = backend.device
    timer = StageTimer(device, sync=sync_stages)
    pipeline, per_push = open_pipeline(backend, config, sessions, batch, step, decoder, timer,
                                       blobs=blobs if stagger else None, overlap=overlap,
                                       resize=resize)
    offset, latencies, frames, rows = 0, [], 0, 0
    start = time.perf_counter()
    pushes = 0
    while True:
        chunk = feed(blobs, sessions, per_push, offset)
        offset += per_push
        t0 = time.perf_counter()
        done = pipeline.push(chunk)
        t1 = time.perf_counter()
        pushes += 1
        if pushes == warm_pushes:
            timer.seconds.clear()
            start, latencies, frames, rows = t1, [], 0, 0
            continue
        if pushes > warm_pushes:
            latencies.append(1e3 * (t1 - t0))
            frames += len(chunk)
            rows += sum(len(r) for r in done.values())
            if t1 - start > seconds:
                break
    rows += sum(len(r) for r in pipeline.flush().values())  # overlap: the last push's batches
    elapsed = time.perf_counter() - start
    lat = np.array(latencies)
    out = {
        "batch": batch, "step": step, "sessions": sessions, "frames_per_push": per_push,
        "phases": "staggered" if stagger else "aligned", "overlap": overlap,
        "resize": pipeline.resizer.running,
        "decoder": decoder.kind, "pushes": len(latencies), "frames": frames, "rows_out": rows,
        "frames_per_s": frames / elapsed,
        "push_ms_p50": float(np.percentile(lat, 50)), "push_ms_p99": float(np.percentile(lat, 99)),
        "fallback_share": pipeline.fallbacks / max(pipeline.heatmaps, 1),
        "graph_error": pipeline.graph_error,
        "max_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9
        if device.type == "cuda" else None,
    }
    if sync_stages:
        out["us_per_frame"] = {k: 1e6 * v / frames for k, v in timer.seconds.items()}
        out["us_per_frame"]["total"] = 1e6 * elapsed / frames
    else:
        # 60-fps sessions fill a push in per_push / (60 · sessions) s: the latency of a frame
        # that waits for its push, then for the push to be processed.
        gather_ms = 1e3 * per_push / (60.0 * sessions)
        out["gather_ms_at_60fps"] = gather_ms
        out["latency_ms_p99_at_60fps"] = gather_ms + out["push_ms_p99"]
    return out


def stage_e2e(backend: Any, config: WeightsConfig, blobs: list[bytes], args: argparse.Namespace,
              budget: Budget, decoder: JpegDecoder, batches: list[int],
              overlap: bool = False) -> list[dict[str, Any]]:
    """Per batch size: the pipeline timed as a whole, then with a sync after each stage (the
    split; not with ``overlap``, which the syncs would undo)."""
    rows = []
    runs = ((False, args.seconds),) if overlap else ((False, args.seconds), (True, args.seconds / 2))
    for b in batches:
        for sync_stages, seconds in runs:
            if budget.left() < seconds + 5:
                rows.append({"batch": b, "skipped": "time budget"})
                continue
            try:
                row = run_e2e(backend, config, blobs, args.sessions, b, args.step, seconds,
                              decoder, sync_stages, overlap=overlap,
                              resize=args.resize,
                              stagger=not args.aligned_phases)
            except Exception as exc:  # noqa: BLE001
                row = {"batch": b, "sync_stages": sync_stages,
                       "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


# CUDA runtime calls that block the host until the device is done (their CPU time is a wait).
WAITS = frozenset({"cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize",
                   "cudaMemcpy", "cudaMemcpy2D"})


class _ProfiledTimer(StageTimer):
    """A StageTimer whose stages are also ranges in the profiler (``stage:NAME``)."""

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        with torch.profiler.record_function(f"stage:{name}"), super().stage(name):
            yield


def stage_rows(events: list[Any], pushes: int) -> tuple[dict[str, dict[str, float]], list[Any]]:
    """Per stage (``stage:NAME`` ranges on the host), its host time and the time and number of
    the device waits (:data:`WAITS`) inside it, per push; and every wait. The profiler also
    reports each range as a device-side annotation (``device_type`` CUDA) spanning the stage's
    kernels: those are left out (counted in, they about doubled the host times of the
    seventeenth session's profile)."""
    from torch.autograd import DeviceType

    host = [e for e in events if e.device_type == DeviceType.CPU]
    stages = [e for e in host if e.name.startswith("stage:")]
    waits = [e for e in host if e.name in WAITS]
    per_stage: dict[str, dict[str, float]] = {}
    for st in stages:
        name = st.name.split(":", 1)[1]
        row = per_stage.setdefault(name, {"host_ms": 0.0, "wait_ms": 0.0, "waits": 0})
        row["host_ms"] += st.time_range.elapsed_us() / 1e3 / pushes
        lo, hi = st.time_range.start, st.time_range.end
        for w in waits:
            if w.thread == st.thread and lo <= w.time_range.start and w.time_range.end <= hi:
                row["wait_ms"] += w.time_range.elapsed_us() / 1e3 / pushes
                row["waits"] += 1 / pushes
    return per_stage, waits


def device_ms(averages: list[Any]) -> float:
    """The device time of every kernel and copy in ``averages`` (``key_averages()``), in ms:
    the GPU's work for the profiled pushes. Only device-side entries count: a host op's
    ``self_device_time_total`` is its kernels' time again (summing both doubled it in the
    first run), and the ``stage:`` ranges' device-side annotations span other kernels. Kernels
    on the branches' streams overlap, so this is an upper bound of the time the GPU was busy."""
    from torch.autograd import DeviceType

    return sum(a.self_device_time_total for a in averages
               if a.device_type == DeviceType.CUDA and not a.key.startswith("stage:")) / 1e3


def _activities(device: torch.device) -> list[Any]:
    """What the profiler records: the host, and the device's kernels on CUDA."""
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])


def top_kernels(averages: list[Any], n: int, per: int, unit: str) -> list[dict[str, Any]]:
    """The ``n`` entries of ``averages`` (``key_averages()``) with the most device time, each
    with its calls and ms a ``unit`` (``per`` units profiled)."""
    kernels = sorted((a for a in averages if getattr(a, "self_device_time_total", 0) > 0),
                     key=lambda a: a.self_device_time_total, reverse=True)[:n]
    return [{"name": a.key[:120], f"calls_per_{unit}": a.count / per,
             f"ms_per_{unit}": a.self_device_time_total / 1e3 / per} for a in kernels]


def profile_pushes(backend: Any, config: WeightsConfig, blobs: list[bytes], sessions: int,
                   batch: int, step: int, overlap: bool, pushes: int | None = None,
                   trace: Path | None = None, resize: str = "eager",
                   decoder: str = "nvjpeg", stagger: bool = True) -> dict[str, Any]:
    """``pushes`` pushes (after 3 warm ones) under the profiler; see the module docstring.
    By default, enough pushes for every session to complete two windows: windows come in
    bursts (the sessions, fed round-robin, complete theirs on the same pushes), so six pushes
    held half or one and a half times the backend calls of their frames."""
    from torch.profiler import profile

    device = backend.device
    pipeline, per_push = open_pipeline(backend, config, sessions, batch, step,
                                       JpegDecoder(device, library=decoder),
                                       _ProfiledTimer(device), blobs=blobs if stagger else None,
                                       overlap=overlap, resize=resize)
    if pushes is None:
        pushes = max(6, -(-2 * sessions * 3 // per_push))
    offset = 0
    for _ in range(3):
        pipeline.push(feed(blobs, sessions, per_push, offset))
        offset += per_push
    pipeline.flush()
    sync()
    calls: list[tuple[int, int]] = []  # (windows, padded size) of each backend call profiled
    pipeline.on_batch = lambda windows, size: calls.append((windows, size))
    start = time.perf_counter()
    with profile(activities=_activities(device)) as prof:
        for _ in range(pushes):
            pipeline.push(feed(blobs, sessions, per_push, offset))
            offset += per_push
        pipeline.flush()
        sync()
    wall = time.perf_counter() - start
    if trace is not None:
        trace.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace / f"push-{'overlap' if overlap else 'serial'}-b{batch}.json"))
    events = prof.events()
    per_stage, waits = stage_rows(events, pushes)
    averages = prof.key_averages()
    host_ops = sorted(averages, key=lambda a: a.self_cpu_time_total, reverse=True)[:15]
    frames = per_push * pushes
    return {
        "batch": batch, "overlap": overlap, "decoder": pipeline.decoder.kind,
        "resize": pipeline.resizer.running, "pushes": pushes, "frames_per_push": per_push,
        "wall_ms_per_push": 1e3 * wall / pushes, "us_per_frame": 1e6 * wall / frames,
        "stages_ms_per_push": per_stage,
        "wait_ms_per_push": sum(w.time_range.elapsed_us() for w in waits) / 1e3 / pushes,
        "device_ms_per_push": device_ms(averages) / pushes,
        # windows come in bursts (every session's window completes on the same push), so a
        # few pushes can hold more or fewer backend calls than the 1/step of their frames:
        # the network's kernels are per call, the decode's per frame
        "phases": "staggered" if stagger else "aligned",
        "backend_calls": len(calls), "windows": sum(w for w, _ in calls),
        "padded_windows": sum(size for _, size in calls),
        "top_host_ops": [{"name": a.key, "calls_per_push": a.count / pushes,
                          "self_cpu_ms_per_push": a.self_cpu_time_total / 1e3 / pushes}
                         for a in host_ops],
        "top_kernels": top_kernels(averages, 40, pushes, "push"),
    }


def stage_profile(backend: Any, config: WeightsConfig, blobs: list[bytes],
                  args: argparse.Namespace, batch: int) -> dict[str, Any]:
    trace = Path(args.trace) if args.trace else None
    return {mode: profile_pushes(backend, config, blobs, args.sessions, batch, args.step,
                                 overlap=mode == "overlap", trace=trace,
                                 resize=args.resize, decoder=args.decoder,
                                 stagger=not args.aligned_phases)
            for mode in ("serial", "overlap")}


def stage_network(backend: Any, config: WeightsConfig, batch: int, calls: int = 20
                  ) -> dict[str, Any]:
    """The backend alone at ``batch``, in the process and on the stream the pipeline uses: its
    time a call (``calls`` calls back to back, after 3 warm ones) and its kernels' device time a
    call under the profiler. Against the profile stage's kernels a push, it says whether the
    network's kernels run slower inside the pipeline (other kernels beside them, a padded
    call) than alone."""
    from torch.profiler import profile

    h, w = config.input_size
    x = torch.rand(batch, 9, h, w, device=backend.device)
    for _ in range(3):
        backend(x)
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        backend(x)
    sync()
    wall = time.perf_counter() - start
    with profile(activities=_activities(backend.device)) as prof:
        for _ in range(calls):
            backend(x)
        sync()
    averages = prof.key_averages()
    return {
        "batch": batch, "calls": calls, "ms_per_call": 1e3 * wall / calls,
        "us_per_window": 1e6 * wall / calls / batch,
        "device_ms_per_call": device_ms(averages) / calls,
        "top_kernels": top_kernels(averages, 25, calls, "call"),
    }


def cpu_rows(backend: Any, config: WeightsConfig, blobs: list[bytes], step: int,
             batch: int) -> tuple[list[FrameResult], int]:
    """Today's path for one stream: cv2 decode, FrameStream (cv2 resize), infer_windows."""
    stream = FrameStream(config, StreamOptions(step=step))
    rows: list[FrameResult] = []
    pending: list = []

    def flush(windows: list) -> None:
        padded = windows + [windows[-1]] * (batch - len(windows))  # only warmed sizes
        for window, probs in zip(windows, infer_windows(backend, padded, config)):
            rows.extend(stream.complete(window, probs))

    for i, data in enumerate(blobs):
        pending.extend(stream.push(Frame(i, i / 60.0, decode_cv2(data).permute(1, 2, 0).numpy())))
        if len(pending) >= batch:
            flush(pending[:batch])
            pending = pending[batch:]
    pending.extend(stream.finish())
    while pending:
        flush(pending[:batch])
        pending = pending[batch:]
    return rows + stream.drain(), len(blobs)


def stage_cpu_path(backend: Any, config: WeightsConfig, blobs: list[bytes], step: int,
                   batch: int) -> dict[str, Any]:
    frames = (blobs * (3 * batch // len(blobs) + 2))[: 3 * batch * 2]
    start = time.perf_counter()
    rows, n = cpu_rows(backend, config, frames, step, batch)
    seconds = time.perf_counter() - start
    return {"batch": batch, "frames": n, "rows": len(rows), "frames_per_s": n / seconds,
            "note": "one thread: decode, resize, post-processing and network calls in series"}


def _against(got: dict[str, list[FrameResult]], serial: dict[str, list[FrameResult]],
             clips: dict[str, list[bytes]]) -> dict[str, Any]:
    """How far a pipeline's rows are from the first serial run's: exactly equal, visibility
    decisions that differ, and the largest position difference where both see the ball."""
    pairs = [(g, w) for s in clips for g, w in zip(got[s], serial[s])]
    both = [float(np.hypot(g.x - w.x, g.y - w.y)) for g, w in pairs if g.visible and w.visible]
    return {
        "identical_to_serial": all(
            [r.as_dict() for r in got[s]] == [r.as_dict() for r in serial[s]] for s in clips),
        "flips_vs_serial": sum(g.visible != w.visible for g, w in pairs),
        "max_diff_vs_serial_px": max(both, default=0.0),
    }


def stage_parity(backend: Any, config: WeightsConfig, blobs: list[bytes], step: int,
                 library: str = "nvjpeg") -> dict[str, Any]:
    clips = {"p0": blobs[:40], "p1": blobs[20:60] if len(blobs) >= 60 else blobs[::-1][:40]}
    want = {sid: cpu_rows(backend, config, clip, step, PARITY_BATCH)[0] for sid, clip in clips.items()}
    out: dict[str, Any] = {}
    serial: dict[str, list[FrameResult]] = {}
    # "_again": the serial pipeline a second time. A backend whose kernels sum with atomics
    # (triton-fp16's squeeze-excitation means) is not bit-reproducible from run to run, so
    # overlap's rows are judged against that run-to-run difference, not against zero.
    def gpu() -> JpegDecoder:
        return JpegDecoder(backend.device, library=library)

    for label, decoder, overlap in (("pipeline_decoder", gpu(), False),
                                    ("pipeline_decoder_again", gpu(), False),
                                    ("pipeline_decoder_overlap", gpu(), True),
                                    ("cv2_decoder", JpegDecoder(backend.device, prefer_gpu=False), False)):
        pipeline = GpuPipeline(backend, config, decoder=decoder, batch_sizes=(PARITY_BATCH,),
                               overlap=overlap)
        got: dict[str, list[FrameResult]] = {sid: [] for sid in clips}
        for sid in clips:
            pipeline.open(sid, StreamOptions(step=step), fps=60.0)
        for k in range(0, 40, 5):
            done = pipeline.push([(sid, f) for sid, clip in clips.items() for f in clip[k : k + 5]])
            for sid, r in done.items():
                got[sid].extend(r)
        for sid in clips:
            got[sid].extend(pipeline.finish(sid))
        flips = sum(g.visible != w.visible for sid in clips for g, w in zip(got[sid], want[sid]))
        both = [(g, w) for sid in clips for g, w in zip(got[sid], want[sid]) if g.visible and w.visible]
        dist = [float(np.hypot(g.x - w.x, g.y - w.y)) for g, w in both]
        out[label] = {
            "decoder": decoder.kind, "frames": sum(len(c) for c in clips.values()),
            "rows_equal_count": all(len(got[s]) == len(want[s]) for s in clips),
            "visibility_flips": flips, "visible_both": len(both),
            "visible_cpu": sum(w.visible for s in clips for w in want[s]),
            "max_position_diff_px": max(dist, default=0.0),
            "p99_position_diff_px": float(np.percentile(dist, 99)) if dist else 0.0,
            "fallback_share": pipeline.fallbacks / max(pipeline.heatmaps, 1),
        }
        if label == "pipeline_decoder":
            serial = got
        elif label != "cv2_decoder":  # the same kernels on the same frames as the serial run
            out[label].update(_against(got, serial, clips))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--backend", default="cudagraph-fp16-folded-cl",
                        help="any registered backend, e.g. triton-fp16")
    parser.add_argument("--weights", default=None, help="default: the packaged weights")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--frames", type=int, default=90, help="distinct JPEG frames")
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--batches", default="16,32,64",
                        help="windows per batch (the dynamic batcher's range)")
    parser.add_argument("--step", type=int, default=3, choices=(1, 3))
    parser.add_argument("--seconds", type=float, default=6.0, help="per e2e row")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the script")
    parser.add_argument("--input-size", default=None,
                        help="HxW network input (default: the weights'; 72x128 for a CPU smoke test)")
    parser.add_argument("--decoder", default="nvjpeg", choices=DECODERS,
                        help="e2e, e2e_overlap, parity and profile stages: the pipeline's JPEG "
                             "decoder")
    parser.add_argument("--resize", default="eager", choices=RESIZE_MODES,
                        help="e2e and profile stages: the pipeline's resize (Resizer's mode)")
    parser.add_argument("--compile-resize", dest="resize", action="store_const", const="compile",
                        help="the same as --resize compile")
    parser.add_argument("--aligned-phases", action="store_true",
                        help="e2e and profile stages: every session's windows in phase, so they "
                             "come in bursts (the feed before the twentieth session; default: "
                             "staggered, as sessions that joined at different times)")
    parser.add_argument("--trace", default=None,
                        help="profile stage: write Chrome traces of its pushes into this folder")
    parser.add_argument("--budget-s", type=float, default=165.0,
                        help="no new stage (or e2e row) after this many seconds")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_e2e.py needs a CUDA GPU (or --device cpu for a smoke test)")
    budget = Budget(args.budget_s)
    batches = sorted(int(b) for b in args.batches.split(","))
    results: dict[str, Any] = {"environment": environment(device), "args": vars(args)}
    print(json.dumps(results, indent=1), flush=True)
    state: dict[str, Any] = {}

    def frames() -> dict[str, Any]:
        state["blobs"], info = make_frames(args.frames, args.quality)
        return info

    def backend() -> dict[str, Any]:
        model = load_weights(args.weights, args.input_size)
        state["config"] = model.config
        start = time.perf_counter()
        state["backend"] = create(args.backend, model, device)
        built = time.perf_counter() - start
        h, w = model.config.input_size
        warm = state["backend"].warmup(sorted({*WARM_SIZES, *batches}), h, w)
        return {"name": args.backend, "weights": model.config.name, "build_s": built,
                "warmup_s": warm}

    def need(*keys: str) -> list[Any]:
        missing = [k for k in keys if k not in state]
        if missing:
            raise RuntimeError(f"needs the stage(s) that make {', '.join(missing)}")
        return [state[k] for k in keys]

    stages: dict[str, Callable[[], Any]] = {
        "frames": frames,
        "decode": lambda: stage_decode(need("blobs")[0], device, 3 * batches[-1]),
        "resize": lambda: stage_resize(need("blobs")[0], device,
                                       state.get("config") or WeightsConfig(), 3 * batches[-1], budget),
        "backend": backend,
        "network": lambda: {str(b): stage_network(*need("backend", "config"), b)
                            for b in batches},
        "post": lambda: stage_post(*need("backend", "blobs", "config"), device, batches[-1]),
        "e2e": lambda: stage_e2e(*need("backend", "config", "blobs"), args, budget,
                                 JpegDecoder(device, library=args.decoder), batches),
        "e2e_overlap": lambda: stage_e2e(*need("backend", "config", "blobs"), args, budget,
                                         JpegDecoder(device, library=args.decoder), batches,
                                         overlap=True),
        "e2e_cpu_decode": lambda: stage_e2e(*need("backend", "config", "blobs"), args, budget,
                                            JpegDecoder(device, prefer_gpu=False), batches[-1:]),
        "cpu_path": lambda: stage_cpu_path(*need("backend", "config", "blobs"), args.step,
                                           batches[-1]),
        "parity": lambda: stage_parity(*need("backend", "config", "blobs"), args.step,
                                       args.decoder),
        "profile": lambda: stage_profile(*need("backend", "config", "blobs"), args,
                                         batches[len(batches) // 2]),
    }
    run_stages(results, stages, args.stages, budget, args.out)


if __name__ == "__main__":
    main()

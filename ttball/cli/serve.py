"""``ttball serve``: the real-time ball worker (HTTP + WebSocket + Open Inference Protocol).

The server listens at once; weights, backend, warm-up and ``--verify`` run in the background and
``/readyz`` turns 200 when they are done. SIGTERM finishes in-flight requests, then exits 0.
API reference: docs/serve.md. ``--ray`` runs replicas of the worker on Ray Serve (docs/ray.md).
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
from pathlib import Path

from ttball.errors import UserError
from ttball.serve.settings import JPEG_DECODERS, RESIZE_CHOICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="eager-fp32",
                   help="backend name (ttball bench --list shows them), e.g. triton-fp16-branches "
                        "on a GPU, or auto: the fastest that passes verification on this machine, "
                        "chosen during start-up and cached, as ttball track does")
    p.add_argument("--auto-clips", nargs="+", metavar="CLIP", default=(),
                   help="with --backend auto: verify the candidates on these videos or image "
                        "folders (your own footage; their first 48 frames) instead of two "
                        "bundled synthetic clips")
    p.add_argument("--weights", help="checkpoint; default: the shipped weights")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind; anything but loopback requires --token")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--warmup-batches", default="1,2,3",
                   help="batch sizes warmed (compiled) at start-up; batches are padded to these")
    p.add_argument("--max-batch", type=int, default=None,
                   help="windows per network call at most (default: the largest warm-up batch)")
    p.add_argument("--max-delay-ms", type=float, default=2.0,
                   help="how long the oldest queued window may wait for a fuller batch")
    p.add_argument("--max-queue", type=int, default=64,
                   help="windows queued over all sessions before requests get 429")
    p.add_argument("--compile-cache", default=None, metavar="DIR",
                   help="on-disk compile cache (TORCHINDUCTOR_CACHE_DIR, the backend's cache_dir)")
    p.add_argument("--max-sessions", type=int, default=64)
    p.add_argument("--session-ttl", type=float, default=120.0, metavar="S",
                   help="seconds an idle session lives")
    p.add_argument("--token", default=None, help="require 'Authorization: Bearer TOKEN'")
    p.add_argument("--token-file", default=None, help="read the bearer token from this file")
    p.add_argument("--verify", action="store_true",
                   help="check the backend against the reference clips before becoming ready")
    p.add_argument("--decode-threads", type=int, default=4,
                   help="threads for JPEG decode, resize and post-processing")
    p.add_argument("--torch-threads", type=int, default=None,
                   help="torch intra-op threads for CPU backends (1 is fastest on a busy host)")
    p.add_argument("--device-pipeline", action="store_true",
                   help="decode (nvJPEG on CUDA), resize, window, run and post-process the JPEG "
                        "frames of every session on the backend's device in one batched push; "
                        "sessions with dedup_ssim keep the host path, PNG/raw RGB frames get 415 "
                        "(docs/serve.md)")
    p.add_argument("--pipeline-overlap", action="store_true",
                   help="with --device-pipeline: overlap a push's network with the next push's "
                        "decode under load; a push's rows come with the next one (docs/serve.md)")
    p.add_argument("--pipeline-depth", type=int, default=1, metavar="N",
                   help="with --pipeline-overlap: pushes whose batches may run at once; a push "
                        "reads back those of the push N before it (default 1; 2 gives a call "
                        "on a shared GPU a push more before its lane waits; docs/serve.md)")
    p.add_argument("--stats-stream", action="store_true",
                   help="with --pipeline-overlap on CUDA and a CUDA-graph backend: each call's "
                        "candidate statistics on a stream of their own, so a lane's next network "
                        "does not queue behind them (docs/serve.md)")
    p.add_argument("--pipeline-resize", default="auto", choices=RESIZE_CHOICES,
                   help="with --device-pipeline: the device resize as torch ops, fused by "
                        "torch.compile (compiles for a few seconds during warm-up) or one Triton "
                        "kernel (and the normalisation one too); all bit-exact with cv2; auto "
                        "(default): the Triton kernel on CUDA, torch ops elsewhere "
                        "(docs/serve.md)")
    p.add_argument("--pipeline-compile-resize", dest="pipeline_resize", action="store_const",
                   const="compile", help="the same as --pipeline-resize compile")
    p.add_argument("--jpeg-decoder", default="nvjpeg", choices=JPEG_DECODERS,
                   help="with --device-pipeline: nvJPEG through torchvision (default), "
                        "nvjpeg-own (experimental, no faster so far: nvJPEG built at first use "
                        "with allocators that don't wait for the GPU, on its JPEG engines; needs "
                        "nvcc), NVIDIA "
                        "nvImageCodec (pip install nvidia-nvimgcodec-cu13 nvidia-nvjpeg), "
                        "nvimgcodec-hw (its hardware JPEG engines only), or cv2 "
                        "on the host; a GPU decoder that can't run falls back (/readyz says why)")
    p.add_argument("--decode-processes", type=int, default=0, metavar="N",
                   help="with --device-pipeline: decode each lane's JPEGs in N child processes "
                        "(a push's frames split among them), whose decode does not wait for the "
                        "lane's network; 0 (default): in the lane's process (docs/serve.md)")
    p.add_argument("--decode-ahead", action="store_true",
                   help="with --decode-processes: each push sends the next queued push's JPEGs "
                        "to the decode processes once its own are decoded, so they decode while "
                        "it runs (docs/serve.md)")
    p.add_argument("--decode-early", action="store_true",
                   help="with --decode-ahead: the next push's JPEGs go to the decode processes "
                        "before a push waits for its own, so each has its next request the "
                        "moment it answers one (docs/serve.md)")
    p.add_argument("--decode-on-arrival", action="store_true",
                   help="with --device-pipeline: each lane decodes an upload's JPEGs on a "
                        "thread of its own as it arrives (nvjpeg-own where it can run), so "
                        "its push finds them decoded (docs/serve.md)")
    p.add_argument("--carry-windows", action=argparse.BooleanOptionalAction, default=True,
                   help="with --pipeline-overlap: a push whose windows fill more "
                        "than one network call launches the full calls and leaves the rest to "
                        "the next push, instead of a short call padded to a warmed size (those "
                        "windows' rows come a push later; docs/serve.md)")
    p.add_argument("--flush-thread", action="store_true",
                   help="with --pipeline-overlap: a lane's flush (reading back what its last "
                        "push left on the GPU when its queue runs short) on a thread of its "
                        "own, so the lane takes its next push while the GPU finishes "
                        "(docs/serve.md)")
    p.add_argument("--flush-after-push", action="store_true",
                   help="with --pipeline-overlap: a lane's thread flushes right after a push "
                        "that leaves less than a full batch queued, in the same hand-off, "
                        "instead of the event loop handing it the flush once the push is "
                        "answered (docs/serve.md)")
    p.add_argument("--live-settings", action="store_true",
                   help="for measurement: PUT /v1/admin/settings changes --flush-after-push, "
                        "--decode-on-arrival (off, or on again when started with it), "
                        "--max-delay-ms and the switch interval while serving (with --ray, on "
                        "every replica), so a load test compares them under one start "
                        "(docs/serve.md)")
    p.add_argument("--pipeline-lanes", type=int, default=1, metavar="N",
                   help="with --device-pipeline: N pipelines in this process, each with its own "
                        "backend, CUDA stream and thread; sessions are dealt to the lane with the "
                        "fewest (docs/serve.md)")
    p.add_argument("--cuda-blocking-sync", action="store_true",
                   help="on CUDA: threads that wait for the GPU sleep instead of spinning on a "
                        "core (CU_CTX_SCHED_BLOCKING_SYNC), for hosts where several workers or "
                        "replicas share the cores; /readyz's gpu.sched shows the mode")
    p.add_argument("--switch-interval-ms", type=float, default=None, metavar="MS",
                   help="Python's switch interval for this process (default Python's 5 ms): "
                        "the longest the event loop waits for the interpreter lock while a "
                        "lane's thread runs Python; no effect measured yet (docs/serve.md)")
    p.add_argument("--batches-ahead", type=int, default=0, metavar="N",
                   help="full batches each lane hands its thread while one runs, so the next "
                        "starts when one ends instead of after the event loop answers it "
                        "(default 0: one at a time; docs/serve.md)")
    p.add_argument("--graceful-timeout", type=float, default=30.0, metavar="S",
                   help="on SIGTERM, wait this long for in-flight requests")
    p.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"))
    ray = p.add_argument_group("Ray Serve (docs/ray.md)")
    ray.add_argument("--ray", action="store_true",
                     help="run as a Ray Serve application: replicas of the worker behind one "
                          "ingress with the same API")
    ray.add_argument("--replicas", type=int, default=None,
                     help="with --ray: worker replicas (default 1)")
    ray.add_argument("--autoscale", default=None, metavar="MIN:MAX",
                     help="with --ray: let Ray Serve scale between MIN and MAX replicas")
    ray.add_argument("--gpus-per-replica", type=float, default=None,
                     help="with --ray: GPUs each replica holds (default: 1 if --device cuda, or "
                          "auto and this machine has one; else 0)")
    ray.add_argument("--cpus-per-replica", type=float, default=None,
                     help="with --ray: CPU slots each replica holds (default 1)")
    ray.add_argument("--mps-sm-percent", type=int, default=None, metavar="P",
                     help="with --ray, replicas sharing a GPU through CUDA MPS (a daemon started "
                          "before Ray): each on at most P%% of the GPU's multiprocessors "
                          "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); without MPS it has no effect. "
                          "With four replicas an H200, 50 held 64 sessions without tipping over "
                          "(docs/ray.md)")
    ray.add_argument("--direct-streams", action="store_true",
                     help="with --ray: each replica serves its sessions' WebSockets on a port of "
                          "its own; POST /v1/sessions answers with its stream_url, so frames skip "
                          "the ingress (which caps the whole application otherwise; docs/ray.md)")
    ray.add_argument("--address", default=None,
                     help="with --ray: the Ray cluster to join (e.g. auto); default: a private "
                          "local cluster")


def settings_from(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from ttball.serve.settings import ServeSettings, parse_batches

    token = args.token
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read --token-file: {getattr(exc, 'strerror', None) or exc}"
                            ) from None
        if not token:  # it would serve without a token, though one was asked for
            raise UserError(f"--token-file {args.token_file} is empty")
    if not 0 <= args.graceful_timeout < math.inf:
        raise UserError(f"--graceful-timeout must be a number of seconds >= 0, got "
                        f"{args.graceful_timeout}")
    settings = ServeSettings(
        backend=args.backend, weights=args.weights, device=args.device,
        auto_clips=tuple(args.auto_clips), host=args.host,
        port=args.port, warmup_batches=parse_batches(args.warmup_batches),
        max_batch=args.max_batch, max_delay_ms=args.max_delay_ms, max_queue=args.max_queue,
        compile_cache=args.compile_cache, max_sessions=args.max_sessions,
        session_ttl_s=args.session_ttl, token=token or None, verify=args.verify,
        decode_threads=args.decode_threads, torch_threads=args.torch_threads,
        device_pipeline=args.device_pipeline,
        pipeline_overlap=args.pipeline_overlap,
        pipeline_depth=args.pipeline_depth,
        pipeline_stats_stream=args.stats_stream,
        pipeline_resize=args.pipeline_resize,
        pipeline_decoder=args.jpeg_decoder,
        pipeline_decode_processes=args.decode_processes,
        pipeline_decode_ahead=args.decode_ahead,
        pipeline_decode_early=args.decode_early,
        pipeline_decode_on_arrival=args.decode_on_arrival,
        pipeline_carry=args.carry_windows, pipeline_flush_thread=args.flush_thread,
        pipeline_flush_after_push=args.flush_after_push, live_settings=args.live_settings,
        pipeline_lanes=args.pipeline_lanes,
        cuda_blocking_sync=args.cuda_blocking_sync,
        switch_interval_ms=args.switch_interval_ms,
        batches_ahead=args.batches_ahead,
        direct_streams=getattr(args, "direct_streams", False),
    )
    settings.validate()
    return settings


def _check_before_listening(settings) -> None:  # type: ignore[no-untyped-def]
    """What a bad command line gets wrong, found in one line before the port is taken: the
    weights (read once here), the backend's name and whether it runs on the device, the
    compile cache's folder. Start-up still fails on what only trying finds (a warm-up out of
    memory, a verify that fails); `ttball serve` then exits too."""
    from ttball.backends.base import resolve_device, spec
    from ttball.cachedir import use_compile_cache
    from ttball.cli.track import check_auto_clip
    from ttball.model.weights import load_model
    from ttball.serve.settings import AUTO

    load_model(settings.weights, device="cpu")
    for clip in settings.auto_clips:  # (they exist: validate checked)
        check_auto_clip(clip)
    if settings.backend_factory is None and settings.backend != AUTO:
        reason = spec(settings.backend).requires(resolve_device(settings.device))
        if reason:
            raise UserError(f"backend {settings.backend} is unavailable on {settings.device}: "
                            f"{reason}")
    if settings.compile_cache:
        use_compile_cache(settings.compile_cache)


# The options only Ray Serve reads (their defaults None or off): without --ray they did nothing.
RAY_ONLY = ("--replicas", "--autoscale", "--gpus-per-replica", "--cpus-per-replica",
            "--mps-sm-percent", "--direct-streams", "--address")


def check_ray_options(args: argparse.Namespace) -> None:
    """Ray-only options without --ray, and --replicas with --autoscale: one line each, where
    they were ignored (a single server started; the autoscaler overrode --replicas)."""
    def given(option: str) -> bool:
        value = getattr(args, option[2:].replace("-", "_"), None)
        return value is not None and value is not False  # (0 is given: --gpus-per-replica 0)

    if not getattr(args, "ray", False):
        for option in RAY_ONLY:
            if given(option):
                why = ("a single worker serves its streams itself" if option == "--direct-streams"
                       else "without it ttball serve runs one worker in this process")
                raise UserError(f"{option} needs --ray: {why}")
    elif given("--replicas") and given("--autoscale"):
        raise UserError("--replicas and --autoscale are exclusive (--autoscale MIN:MAX sets "
                        "the replicas)")


def run(args: argparse.Namespace) -> int:
    check_ray_options(args)
    if getattr(args, "ray", False):
        from ttball.distributed.serve import run_serve

        return run_serve(args)
    try:
        import uvicorn

        from ttball.serve.app import create_app, draining_server, listen_socket, uvicorn_options
    except ImportError as exc:
        raise UserError(f"ttball serve needs the serve extras (pip install 'ttball[serve]'): "
                        f"{exc}") from None
    settings = settings_from(args)
    _check_before_listening(settings)
    sock = listen_socket(settings.host, settings.port)  # a taken port fails before the load
    try:
        app = create_app(settings)
        config = uvicorn.Config(app, host=settings.host, port=settings.port,
                                log_level=args.log_level,
                                timeout_graceful_shutdown=args.graceful_timeout, lifespan="on",
                                **uvicorn_options())
        # uvicorn logs its address only when it binds the socket itself (the actual port for 0)
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        logging.getLogger("uvicorn.error").info(
            "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", host, sock.getsockname()[1])
        # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal to the handler
        # that was installed before it: make that one a no-op so a clean shutdown exits 0.
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
        worker = app.state.worker
        server = draining_server(config, worker)
        failed: list[bool] = []

        def stop() -> None:  # (should_exit is read by the server's loop)
            failed.append(True)
            server.should_exit = True

        worker.on_failed = stop
        try:
            server.run(sockets=[sock])
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        sock.close()
    if failed:  # its line is printed already; a supervisor sees the process end
        return 1
    return 0

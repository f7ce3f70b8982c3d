"""The worker's settings (one frozen dataclass) and the error type every route answers with.

The CLI fills :class:`ServeSettings` from its arguments; :func:`ttball.serve.create_app` reads it
when the app is built. Nothing here reads the environment or a file.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttball.errors import UserError

MiB = 1 << 20


# ttball.kernels.prepost.DECODERS, named here without importing torch (a test keeps them equal)
JPEG_DECODERS = ("nvjpeg", "nvjpeg-own", "nvimgcodec", "nvimgcodec-hw", "cv2")
# ttball.kernels.prepost_image.RESIZE_MODES, likewise
RESIZE_MODES = ("eager", "compile", "triton")
# --pipeline-resize's choices: "auto" (the default) is "triton" on a CUDA device, else "eager"
# (:func:`resize_mode`): eight `serve --ray` replicas served 7,361-7,906 frames/s with it
# against 7,069-7,293 with "compile" (forty-sixth session, docs/benchmarks/h100-2026-12-05/)
RESIZE_CHOICES = ("auto", *RESIZE_MODES)
# --backend auto: the fastest backend that passes verification here (ttball.backends.auto)
AUTO = "auto"
# a CUDA MPS client's cap on its GPU's multiprocessors, in % (`serve --ray --mps-sm-percent`)
MPS_PERCENT_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``ttball serve`` can be told. Sizes in bytes, times in seconds."""

    backend: str = "eager-fp32"
    weights: str | None = None
    device: str = "auto"
    auto_clips: tuple[str, ...] = ()  # --backend auto verifies on these (default: bundled)
    host: str = "127.0.0.1"
    port: int = 8000
    warmup_batches: tuple[int, ...] = (1, 2, 3)
    max_batch: int | None = None  # None: the largest warm-up batch
    # Waiting 2 ms for company costs little next to one GPU call (1.2 ms at batch 1, 9.4 ms at
    # batch 16 for the best compiled recipe: shared/perf/h200-baseline.md).
    max_delay_ms: float = 2.0
    # Windows queued (or reserved) over all sessions: 64 is four batches of 16, about 40 ms of
    # H200 work with the best recipe; beyond it, answering 429 beats queueing late frames.
    max_queue: int = 64
    compile_cache: str | None = None
    max_sessions: int = 64
    session_ttl_s: float = 120.0
    token: str | None = None
    verify: bool = False
    fps: float = 30.0  # frame times of sessions whose frames carry neither ?t= nor a clock
    max_frame_bytes: int = 16 * MiB  # one encoded or raw frame
    max_body_bytes: int = 64 * MiB  # one request to /v1/sessions/{id}/frames or /v2/.../infer
    max_video_bytes: int = 2048 * MiB  # one body to /v1/track
    max_frame_pixels: int = 7680 * 4320  # 8K UHD; larger frames are refused (413)
    max_ws_inflight: int = 16  # frames of one WebSocket decoded or waiting for the network
    decode_threads: int = 4
    torch_threads: int | None = None  # torch intra-op threads (CPU backends); None: torch's default
    web_dir: str | None = None  # None: ttball/web when it holds an index.html
    # JPEG bytes of every session decoded, resized, windowed, run and post-processed on the
    # backend's device by one GpuPipeline (ttball/serve/device.py); off: today's host path.
    device_pipeline: bool = False
    # With device_pipeline: a push leaves its batches running on the GPU while the next push
    # decodes; rows of a push come with the next one (or when the queue runs short).
    pipeline_overlap: bool = False
    # With pipeline_overlap: the pushes whose batches may be left running at once; a push reads
    # back the batches of the push this many before it (2: rows come a push later still).
    pipeline_depth: int = 1
    # With pipeline_overlap on CUDA: each call's candidate statistics on a CUDA stream of their
    # own, so a lane's next network does not queue behind them (a backend whose outputs are its
    # own only: every CUDA-graph backend; otherwise ignored, /readyz says).
    pipeline_stats_stream: bool = False
    # With device_pipeline: how the device resize runs (ttball.kernels.prepost_image.Resizer;
    # all bit-exact with cv2): "eager" (torch ops), "compile" (fused by torch.compile; compiles
    # during warm-up) or "triton" (one Triton kernel that reads a decode call's frames in place,
    # and the normalisation as a lookup kernel); falls back to eager if the chosen one fails.
    # "auto": "triton" on a CUDA device, else "eager" (resize_mode).
    pipeline_resize: str = "auto"
    # With device_pipeline: the JPEG decoder (ttball.kernels.prepost.DECODERS): "nvjpeg"
    # (torchvision), "nvjpeg-own" (experimental, no faster in serve so far: nvJPEG built
    # here with stream-ordered allocators, on the JPEG engines; ttball.kernels.nvjpeg_own), "nvimgcodec" (NVIDIA
    # nvImageCodec), "nvimgcodec-hw" (its hardware JPEG engines only) or "cv2" (host); a GPU
    # one that can't run falls back, and /readyz says why.
    pipeline_decoder: str = "nvjpeg"
    # With device_pipeline: each lane's decoder runs in this many child processes
    # (ttball.kernels.decode_process; a push's frames split among them), so its decode does not
    # wait for the lane's network; 0: in the lane's own process.
    pipeline_decode_processes: int = 0
    pipeline_decode_ahead: bool = False  # a push starts the next one's decode (needs processes)
    # With decode_ahead: the next push's decode is sent before a push waits for its own, so each
    # child has its next request the moment it answers one (DecoderProcess's ``then``).
    pipeline_decode_early: bool = False
    # With device_pipeline: each lane's uploads decoded on a thread of their own as the event
    # loop queues them (nvjpeg-own where it can run; ttball.kernels.arrival), so a push finds
    # its frames decoded instead of decoding them itself.
    pipeline_decode_on_arrival: bool = False
    # With pipeline_overlap: a push's windows past its full calls carried to the next push
    # (--no-carry-windows turns it off; nothing to carry to without overlap)
    pipeline_carry: bool = True
    # With pipeline_overlap: a lane's flush (the read-back when its queue runs short) on a
    # thread of its own, waiting for the GPU while the lane takes its next push, instead of on
    # the lane's thread before it (ttball/serve/batcher.py, Batcher.set_idle; docs/serve.md)
    pipeline_flush_thread: bool = False
    # With pipeline_overlap: a lane's thread flushes right after a push that leaves less than a
    # full batch queued, in the same hand-off, instead of the event loop handing the flush over
    # once the push is settled (Batcher's idle_after_batch; docs/serve.md)
    pipeline_flush_after_push: bool = False
    # With device_pipeline: this many GpuPipelines in the process, each with its own backend,
    # CUDA stream and backend thread; sessions are dealt to the lane with the fewest, so the
    # lanes' host work overlaps (ttball/serve/device.py, DeviceLanes).
    pipeline_lanes: int = 1
    # On CUDA: host threads sleep while they wait for the GPU instead of spinning on a core
    # (ttball.cudasched; set before the process's first CUDA work; /readyz says if it could not).
    cuda_blocking_sync: bool = False
    # The interpreter's switch interval (sys.setswitchinterval) in ms, set for the whole process
    # when the worker starts: how long a thread that wants the interpreter lock (the event loop,
    # which reads and answers every session) waits before its holder (a lane's Python) must
    # drop it. None: Python's own, 5 ms.
    switch_interval_ms: float | None = None
    # For measurement: PUT /v1/admin/settings changes a few settings while serving (the flush's
    # placement, the wait for company, the switch interval; Worker.change_settings), so a load
    # test can compare them under one start of the server (docs/serve.md). Off: that route is 404.
    live_settings: bool = False
    # Full batches each lane hands its thread while one runs (Batcher._loop): the thread starts
    # the next when one ends instead of waiting for the event loop to answer it; 0: one at a time.
    batches_ahead: int = 0
    # serve --ray only: each replica also serves its sessions' WebSockets on a port of its own,
    # and the ingress answers a session's creation with that address (``stream_url``), so the
    # frames skip the ingress (docs/ray.md, "Direct streams").
    direct_streams: bool = False
    # Build the backend with this instead of the registry: (model, device) -> Backend.
    backend_factory: Callable[..., Any] | None = field(default=None, compare=False)

    @property
    def batch_limit(self) -> int:
        return self.max_batch if self.max_batch is not None else max(self.warmup_batches)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def validate(self) -> None:
        """Refuse settings that can't work; the message says which option to change."""
        if not 0 <= self.port <= 65535:
            raise UserError(f"--port must be in 0..65535, got {self.port}")
        if self.auto_clips and self.backend != "auto":
            raise UserError("--auto-clips only applies with --backend auto")
        for clip in self.auto_clips:
            if not Path(clip).exists():
                raise UserError(f"--auto-clips {clip}: no such file or folder")
        if not self.warmup_batches or min(self.warmup_batches) < 1:
            raise UserError("--warmup-batches needs one or more batch sizes >= 1, e.g. 1,2,3")
        if self.batch_limit < 1:
            raise UserError(f"--max-batch must be at least 1, got {self.batch_limit}")
        if self.batch_limit > max(self.warmup_batches):
            raise UserError(
                f"--max-batch {self.batch_limit} exceeds the largest warmed batch "
                f"({max(self.warmup_batches)}); a running worker must never compile: add "
                f"{self.batch_limit} to --warmup-batches"
            )
        if not self.max_delay_ms >= 0:  # (NaN fails it too)
            raise UserError(f"--max-delay-ms must be >= 0, got {self.max_delay_ms}")
        if self.decode_threads < 1:
            raise UserError(f"--decode-threads must be >= 1, got {self.decode_threads}")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise UserError(f"--torch-threads must be >= 1, got {self.torch_threads}")
        if self.max_queue < self.batch_limit:
            raise UserError(f"--max-queue ({self.max_queue}) must be at least --max-batch")
        if self.pipeline_overlap and not self.device_pipeline:
            raise UserError("--pipeline-overlap needs --device-pipeline")
        if not 1 <= self.pipeline_depth <= 4:
            raise UserError(f"--pipeline-depth must be between 1 and 4, got {self.pipeline_depth}")
        if self.pipeline_depth > 1 and not self.pipeline_overlap:
            raise UserError("--pipeline-depth needs --pipeline-overlap")
        if self.pipeline_stats_stream and not self.pipeline_overlap:
            raise UserError("--stats-stream needs --pipeline-overlap")
        if self.pipeline_flush_thread and not self.pipeline_overlap:
            raise UserError("--flush-thread needs --pipeline-overlap")
        if self.pipeline_flush_after_push and not self.pipeline_overlap:
            raise UserError("--flush-after-push needs --pipeline-overlap")
        if self.pipeline_flush_after_push and self.pipeline_flush_thread:
            raise UserError("--flush-after-push and --flush-thread are exclusive (a flush on a "
                            "thread of its own never runs on the lane's)")
        if self.pipeline_flush_thread and self.pipeline_carry:
            raise UserError("--flush-thread needs --no-carry-windows (a flush launches the "
                            "carried windows, which only the lane's thread may)")
        if self.pipeline_resize not in RESIZE_CHOICES:
            raise UserError(f"--pipeline-resize must be one of {', '.join(RESIZE_CHOICES)}, "
                            f"got {self.pipeline_resize!r}")
        if self.pipeline_resize != "auto" and not self.device_pipeline:
            raise UserError("--pipeline-resize needs --device-pipeline")
        if self.pipeline_decoder not in JPEG_DECODERS:
            raise UserError(f"--jpeg-decoder must be one of {', '.join(JPEG_DECODERS)}, got "
                            f"{self.pipeline_decoder!r}")
        if self.pipeline_decoder != "nvjpeg" and not self.device_pipeline:
            raise UserError("--jpeg-decoder needs --device-pipeline")
        if not 0 <= self.pipeline_decode_processes <= 16:
            raise UserError("--decode-processes must be in 0..16, got "
                            f"{self.pipeline_decode_processes}")
        if self.pipeline_decode_processes and not self.device_pipeline:
            raise UserError("--decode-processes needs --device-pipeline")
        if self.pipeline_decode_on_arrival and not self.device_pipeline:
            raise UserError("--decode-on-arrival needs --device-pipeline")
        if self.pipeline_decode_on_arrival and self.pipeline_decode_processes:
            raise UserError("--decode-on-arrival and --decode-processes are exclusive (frames "
                            "decoded on arrival are decoded in the lane's process)")
        if self.pipeline_decode_early and not self.pipeline_decode_ahead:
            raise UserError("--decode-early needs --decode-ahead")
        if self.pipeline_decode_ahead and not self.pipeline_decode_processes:
            raise UserError("--decode-ahead needs --decode-processes (1 or more)")
        if self.pipeline_lanes < 1:
            raise UserError(f"--pipeline-lanes must be >= 1, got {self.pipeline_lanes}")
        if self.pipeline_lanes > 1 and not self.device_pipeline:
            raise UserError("--pipeline-lanes needs --device-pipeline")
        if not 0 <= self.batches_ahead <= 4:
            raise UserError(f"--batches-ahead must be between 0 and 4, got {self.batches_ahead}")
        if self.switch_interval_ms is not None and not 0.01 <= self.switch_interval_ms <= 100:
            raise UserError(f"--switch-interval-ms must be between 0.01 and 100, got "
                            f"{self.switch_interval_ms:g}")
        if self.max_sessions < 1 or not 0 < self.session_ttl_s < math.inf:
            raise UserError(f"--max-sessions must be >= 1 and --session-ttl a number of seconds "
                            f"> 0, got {self.max_sessions} and {self.session_ttl_s}")
        if not self.loopback and not self.token:
            raise UserError(
                f"refusing to listen on {self.host} (not loopback) without --token; "
                "bind 127.0.0.1 or give a bearer token"
            )


def resize_mode(setting: str, device_type: str) -> str:
    """The device resize's mode (:data:`RESIZE_MODES`) for a ``--pipeline-resize`` setting on a
    device of this type (``"cuda"``, ``"cpu"``): ``"auto"`` is the Triton kernel on CUDA, the
    torch ops elsewhere (Triton's kernels need a GPU); any other setting is itself."""
    if setting != "auto":
        return setting
    return "triton" if device_type == "cuda" else "eager"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_batches(text: str) -> tuple[int, ...]:
    """``"1,2,3"`` → ``(1, 2, 3)``, sorted and unique."""
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UserError(f"--warmup-batches wants comma-separated integers, got {text!r}") from None
    return tuple(sizes)


class ApiError(Exception):
    """An error the client can act on: HTTP status, a stable ``code`` and a message.

    Rendered as ``{"error": {"code": code, "message": message}}`` (the /v2 routes render the
    Open Inference Protocol's ``{"error": message}`` instead). ``frame``: the frame number it
    refers to, when one frame was refused (a WebSocket's error message carries it).
    """

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None,
        frame: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}
        self.frame = frame

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions pickle as ``cls(*args)`` and ``args`` holds only the message, so without
        # this an error raised on a Ray replica would reach the ingress as Ray's
        # UnserializableException (a 500) instead of its own 4xx. Works for every subclass.
        return _restore_api_error, (type(self), self.args, dict(self.__dict__))

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


def _restore_api_error(cls: type[ApiError], args: tuple[Any, ...], state: dict[str, Any]) -> ApiError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(state)
    return exc

"""The device pre-processing (``ttball.kernels.prepost_image``) and :class:`GpuPipeline` against
the CPU path (``cv2`` decode → :class:`FrameStream` → ``infer_windows`` → ``detect`` → tracker),
on CPU tensors. Post-processing alone: ``test_prepost_post.py``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from ttball.backends import create
from ttball.backends.base import BackendBase
from ttball.backends.cudagraph import GraphCache, GraphedBackend
from ttball.frames import Frame, normalize, preprocess
from ttball.kernels import prepost_image
from ttball.kernels.arrival import ArrivalDecoder
from ttball.kernels.decode_process import DecoderProcess
from ttball.kernels.prepost import (
    GPU_STAGES,
    GPU_STEPS,
    DecodeError,
    GpuPipeline,
    JpegDecoder,
    PostOptions,
    Resizer,
    StageTimer,
    decode_cv2,
    gpu_jpeg_reason,
    gpu_split,
    stack_windows,
)
from ttball.model.config import WeightsConfig
from ttball.pipeline import infer_windows
from ttball.results import FrameResult
from ttball.stream import FrameStream, StreamOptions

CENTROID_PX = 0.05
ANGLE_DEG = 0.5
SIZES = [  # (source w, h) → (network w, h)
    ((1280, 720), (512, 288)),  # the real case: 2.5x down
    ((320, 180), (128, 72)),
    ((128, 72), (128, 72)),  # identity
    ((128, 72), (72, 128)),  # aspect changes: down in x, up in y
    ((100, 60), (128, 72)),  # up
    ((256, 144), (128, 72)),  # exactly 2x: OpenCV switches to INTER_AREA
    ((333, 187), (128, 72)),  # odd
]


def rgb_noise(w: int, h: int, seed: int, smooth: bool) -> np.ndarray:
    img = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return cv2.GaussianBlur(img, (0, 0), 2.0) if smooth else img


def to_chw(rgb: np.ndarray) -> Tensor:
    return torch.from_numpy(rgb).permute(2, 0, 1)


# -- resize, decode, windows -------------------------------------------------------------------
@pytest.mark.parametrize(("src", "dst"), SIZES)
@pytest.mark.parametrize("smooth", [False, True])
def test_resize_is_bit_exact_with_cv2(src: tuple[int, int], dst: tuple[int, int], smooth: bool) -> None:
    frames = [rgb_noise(*src, seed, smooth) for seed in range(2)]
    got = Resizer(dst[1], dst[0])(torch.stack([to_chw(f) for f in frames]))
    for f, g in zip(frames, got):
        want = cv2.resize(f, dst, interpolation=cv2.INTER_LINEAR)
        assert torch.equal(g.permute(1, 2, 0), torch.from_numpy(want))


def test_float_bilinear_would_be_off_by_one() -> None:
    """Why the fixed-point emulation: ``F.interpolate`` in float + round differs from cv2 by
    one level in about 8 % of the values at 1280x720 → 512x288 (never by more)."""
    frame = rgb_noise(1280, 720, 0, smooth=True)
    want = torch.from_numpy(cv2.resize(frame, (512, 288), interpolation=cv2.INTER_LINEAR))
    x = to_chw(frame)[None].float()
    approx = F.interpolate(x, size=(288, 512), mode="bilinear", align_corners=False)
    diff = (approx.round()[0].permute(1, 2, 0) - want.float()).abs()
    assert diff.max() == 1
    assert 0.02 < (diff > 0).float().mean() < 0.15


def jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                            [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return data.tobytes()


def with_comment(data: bytes, text: bytes = b"same pixels, other bytes") -> bytes:
    """The same JPEG with a COM segment after SOI: identical pixels, different bytes."""
    return data[:2] + b"\xff\xfe" + (len(text) + 2).to_bytes(2, "big") + text + data[2:]


def test_cpu_decoder_equals_the_workers_cv2_decode() -> None:
    frames = [rgb_noise(64, 48, s, smooth=True) for s in range(3)]
    blobs = [jpeg(f) for f in frames]
    decoder = JpegDecoder("cpu")
    assert decoder.kind == "cv2" and gpu_jpeg_reason(torch.device("cpu"))
    for data, got in zip(blobs + [with_comment(blobs[0])], decoder(blobs + [with_comment(blobs[0])])):
        want = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR),
                            cv2.COLOR_BGR2RGB)
        assert got.shape == (3, 48, 64) and torch.equal(got.permute(1, 2, 0), torch.from_numpy(want))
    with pytest.raises(DecodeError, match="frame 1"):
        decoder([blobs[0], b"not a jpeg"])
    assert decode_cv2(blobs[1]).dtype == torch.uint8


class _FakeNvImgCodec:
    """The part of ``nvidia.nvimgcodec`` the decoder uses, decoding with cv2 on the host: a
    CodeStream refuses bytes without an image header, ``decode`` gives None for a stream it
    can't decode, images are HWC RGB arrays."""

    class CodeStream:
        def __init__(self, data: bytes) -> None:
            if not data.startswith(b"\xff\xd8"):
                raise RuntimeError("Failed to get image info")
            self.data = data

    class BackendKind:
        HW_GPU_ONLY = "hw"

    class Decoder:
        """With ``backend_kinds=[HW_GPU_ONLY]`` it refuses (None) JPEGs with a comment
        segment, as the hardware engines refuse progressive ones."""

        def __init__(self, device_id: int, backend_kinds: list | None = None) -> None:
            self.device_id, self.streams, self.decoded = device_id, [], 0
            self.hardware = backend_kinds == ["hw"]

        def decode(self, streams: list, cuda_stream: int = 0) -> list:
            self.streams.append(cuda_stream)
            out = []
            for s in streams:
                bgr = cv2.imdecode(np.frombuffer(s.data, np.uint8), cv2.IMREAD_COLOR)
                if self.hardware and b"\xff\xfe" in s.data:
                    bgr = None
                out.append(None if bgr is None else cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
                self.decoded += bgr is not None
            return out


def test_nvimgcodec_decoder_wraps_its_images_and_names_bad_frames(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``library="nvimgcodec"``: on a machine without it (or without CUDA) the decoder falls
    back and says why; its decode path, run here on a stand-in module, returns CHW tensors
    equal to cv2's and names the frame it can't decode."""
    import sys
    import types

    from ttball.kernels.prepost import nvimgcodec_reason

    decoder = JpegDecoder("cpu", library="nvimgcodec")
    assert decoder.kind == "cv2" and "not cuda" in decoder.gpu_reason
    assert nvimgcodec_reason(torch.device("cpu")) == "device is cpu, not cuda"
    with pytest.raises(ValueError, match="unknown JPEG decoder"):
        JpegDecoder("cpu", library="pillow")

    package = types.ModuleType("nvidia")
    package.nvimgcodec = _FakeNvImgCodec  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nvidia", package)
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", _FakeNvImgCodec)
    decoder.kind, decoder._nvimg = "nvimgcodec", _FakeNvImgCodec.Decoder(0)  # as on a GPU with it
    frames = [rgb_noise(64, 48, s, smooth=True) for s in range(3)]
    blobs = [jpeg(f) for f in frames]
    got = decoder(blobs)
    cv2_decoder = JpegDecoder("cpu")
    for mine, theirs in zip(got, cv2_decoder(blobs)):
        assert mine.shape == (3, 48, 64) and torch.equal(mine, theirs)
    assert decoder._nvimg.streams == [0]  # the caller's stream (CPU: none)
    with pytest.raises(DecodeError, match="frame 1"):
        decoder([blobs[0], b"not a jpeg"])  # no header: refused by CodeStream
    with pytest.raises(DecodeError, match="frame 2"):
        decoder([blobs[0], blobs[1], b"\xff\xd8 truncated"])  # decode gives None


def test_a_failed_nvjpeg_batch_is_decoded_frame_by_frame_to_name_the_bad_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``library="nvjpeg"`` (torchvision's decode_jpeg, a stand-in module here): one bad frame
    fails the whole batch call, so the frames are decoded one by one; a frame nvJPEG refuses
    but OpenCV reads (a CMYK JPEG, say; here any real JPEG) comes out as the host path decodes
    it, in its place, and the first that fails there too is named; a good batch is one call."""
    import sys
    import types

    calls: list[int] = []

    def decode_jpeg(data: object, mode: object = None, device: object = None) -> object:
        items = data if isinstance(data, list) else [data]
        calls.append(len(items))
        if any(bytes(d.numpy()) == b"bad" or bytes(d.numpy()[:2]) == b"\xff\xd8"
               for d in items):
            raise RuntimeError("Unsupported marker type 0x61")
        images = [torch.full((3, 2, 2), len(bytes(d.numpy())), dtype=torch.uint8) for d in items]
        return images if isinstance(data, list) else images[0]

    io = types.ModuleType("torchvision.io")
    io.decode_jpeg = decode_jpeg  # type: ignore[attr-defined]
    io.ImageReadMode = types.SimpleNamespace(RGB="RGB")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchvision", types.ModuleType("torchvision"))
    monkeypatch.setitem(sys.modules, "torchvision.io", io)
    decoder = JpegDecoder("cpu")
    decoder.kind = "nvjpeg"  # as on a GPU
    assert [int(i[0, 0, 0]) for i in decoder([b"ok", b"good"])] == [2, 4] and calls == [2]
    calls.clear()
    with pytest.raises(DecodeError, match="frame 2 of the batch: nvJPEG: Unsupported marker"):
        decoder([b"ok", b"good", b"bad", b"ok"])
    assert calls == [4, 1, 1, 1]  # the batch, then one by one up to the bad frame
    real = cv2.imencode(".jpg", np.full((2, 2, 3), (10, 20, 30), np.uint8))[1].tobytes()
    calls.clear()
    out = decoder([b"ok", real, b"good"])
    assert calls == [3, 1, 1, 1]  # refused alone too, then the host's decode in its place
    assert [int(i[0, 0, 0]) for i in (out[0], out[2])] == [2, 4]
    torch.testing.assert_close(out[1], decode_cv2(real))  # RGB: (30, 20, 10)


def test_nvimgcodec_hw_hands_refused_frames_to_the_general_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``library="nvimgcodec-hw"``: off a GPU it falls back like the others; on a stand-in
    module, frames the hardware engines refuse are decoded by the general nvImageCodec decoder
    (opened once, on first need) and land in their places; a frame neither decodes is named."""
    import sys
    import types

    from ttball.kernels.prepost import nvimgcodec_reason

    decoder = JpegDecoder("cpu", library="nvimgcodec-hw")
    assert decoder.kind == "cv2" and "not cuda" in decoder.gpu_reason
    assert nvimgcodec_reason(torch.device("cpu"), hardware=True) == "device is cpu, not cuda"

    package = types.ModuleType("nvidia")
    package.nvimgcodec = _FakeNvImgCodec  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nvidia", package)
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", _FakeNvImgCodec)
    general = _FakeNvImgCodec.Decoder(0)
    opened: list[bool] = []

    def fake_open(device: torch.device, hardware: bool = False) -> tuple[object, None]:
        opened.append(hardware)
        return general, None

    monkeypatch.setattr(prepost_image, "_open_nvimgcodec", fake_open)
    hardware = _FakeNvImgCodec.Decoder(0, backend_kinds=[_FakeNvImgCodec.BackendKind.HW_GPU_ONLY])
    decoder.kind, decoder._nvimg = "nvimgcodec-hw", hardware  # as on a GPU with the engines
    frames = [rgb_noise(64, 48, s, smooth=True) for s in range(4)]
    blobs = [jpeg(f) for f in frames]
    blobs[1] = with_comment(blobs[1])
    blobs[3] = with_comment(blobs[3])
    got = decoder(blobs)
    for mine, theirs in zip(got, JpegDecoder("cpu")(blobs), strict=True):
        assert mine.shape == (3, 48, 64) and torch.equal(mine, theirs)
    assert (hardware.decoded, general.decoded, opened) == (2, 2, [False])
    decoder(blobs)
    assert opened == [False]  # the general decoder is kept
    with pytest.raises(DecodeError, match="frame 2"):
        decoder([blobs[0], blobs[1], b"\xff\xd8 truncated"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nvimgcodec_matches_nvjpeg_on_cuda() -> None:
    """The two GPU decoders on the same JPEGs: same shapes; pixels within the rounding of two
    IDCT and chroma upsampling implementations."""
    from ttball.kernels.prepost import nvimgcodec_reason

    cuda = torch.device("cuda")
    if nvimgcodec_reason(cuda) or gpu_jpeg_reason(cuda):
        pytest.skip(nvimgcodec_reason(cuda) or gpu_jpeg_reason(cuda))
    blobs = [jpeg(draw(i, (320, 180), True)) for i in range(4)]
    mine = JpegDecoder(cuda, library="nvimgcodec")
    assert mine.kind == "nvimgcodec"
    for a, b in zip(mine(blobs), JpegDecoder(cuda)(blobs)):
        assert a.shape == b.shape == (3, 180, 320) and a.device.type == "cuda"
        diff = (a.int() - b.int()).abs()
        assert diff.float().mean() < 1.0 and diff.max() <= 16
    with pytest.raises(DecodeError, match="frame 1"):
        mine([blobs[0], b"not a jpeg"])


def test_stacked_windows_normalise_like_preprocess(small_config: WeightsConfig) -> None:
    frames = [rgb_noise(320, 180, s, smooth=True) for s in range(4)]
    resizer = Resizer(small_config.input_height, small_config.input_width)
    small = list(resizer(torch.stack([to_chw(f) for f in frames])))
    batch = normalize(stack_windows([small[0:3], small[1:4]]), small_config)
    want = torch.cat([preprocess(frames[0:3], small_config), preprocess(frames[1:4], small_config)])
    assert torch.equal(batch, want)


# -- the pipeline against FrameStream + the CPU path -------------------------------------------
class BrightBackend(BackendBase):
    """A fake network whose heatmaps light up where the frame is bright: real blobs that move
    with the drawn ball, so the device post-processing (not its fallback) is what's compared."""

    name = "bright"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(torch.device(device))

    def run(self, batch: Tensor) -> Tensor:
        b, _, h, w = batch.shape
        return 4.0 * (batch.view(b, 3, 3, h, w).mean(2) - 0.7)


class GraphedBright(GraphedBackend):
    """:class:`BrightBackend`'s network replayed from CUDA graphs (CUDA only)."""

    name = "bright-graphed"

    def __init__(self) -> None:
        super().__init__(torch.device("cuda"))
        self._graphs = GraphCache(BrightBackend("cuda").run, self.device, warmup=1)

    def run(self, batch: Tensor) -> Tensor:
        return self._graphs(batch)


def draw(i: int, size: tuple[int, int], streak: bool) -> np.ndarray:
    """A white ball (or a streak, as a fast ball blurs) crossing a green table."""
    w, h = size
    img = np.full((h, w, 3), (30, 90, 40), np.uint8)
    cx, cy = 8 + i * (w - 16) / 11, h / 2 + h / 6 * math.sin(i / 2)
    r = max(2, round(w / 80))
    if streak:
        dx, dy = 3 * r * math.cos(i / 3), 3 * r * math.sin(i / 3)
        cv2.line(img, (round(cx - dx), round(cy - dy)), (round(cx + dx), round(cy + dy)),
                 (255, 255, 255), r)
    else:
        cv2.circle(img, (round(cx), round(cy)), r, (255, 255, 255), -1)
    return img


def session_frames(count: int, size: tuple[int, int], streak: bool) -> list[bytes]:
    """JPEGs of a clip with an exact duplicate (same bytes) at 4 and a pixel-equal re-encode
    (other bytes) at 8: both are dropped by FrameStream's duplicate filter."""
    blobs = [jpeg(draw(i, size, streak)) for i in range(count)]
    blobs[4] = blobs[3]
    blobs[8] = with_comment(blobs[7])
    return blobs


def cpu_rows(backend: BackendBase, config: WeightsConfig, blobs: list[bytes],
             options: StreamOptions, fps: float) -> list[FrameResult]:
    stream = FrameStream(config, options)
    rows: list[FrameResult] = []

    def run(windows: list) -> None:
        if windows:
            for window, probs in zip(windows, infer_windows(backend, windows, config)):
                rows.extend(stream.complete(window, probs))

    for i, data in enumerate(blobs):
        rgb = decode_cv2(data).permute(1, 2, 0).numpy()
        run(stream.push(Frame(i, i / fps, rgb)))
    run(stream.finish())
    return rows + stream.drain()


def cpu_pipeline(config: WeightsConfig, **options: object) -> GpuPipeline:
    """The pipeline on CPU tensors with cv2 decode and the fake network, batches of 1, 2, 4."""
    return GpuPipeline(BrightBackend(), config, decoder=JpegDecoder("cpu"), batch_sizes=(1, 2, 4),
                       **options)  # type: ignore[arg-type]


def gpu_rows(pipeline: GpuPipeline, sessions: dict[str, tuple[list[bytes], StreamOptions]],
             fps: float, chunk: int, flush: bool = False,
             upcoming: Callable[[int], list[tuple[str, bytes]]] | None = None,
             ) -> dict[str, list[FrameResult]]:
    """Push the sessions' frames interleaved, ``chunk`` frames per push, then (``flush``) flush,
    then finish each. ``upcoming``: the upcoming frames each push is told, given its start."""
    for sid, (_, options) in sessions.items():
        pipeline.open(sid, options, fps)
    queue = [(sid, blobs[k]) for k in range(max(len(b) for b, _ in sessions.values()))
             for sid, (blobs, _) in sessions.items() if k < len(blobs)]
    rows: dict[str, list[FrameResult]] = {sid: [] for sid in sessions}
    for start in range(0, len(queue), chunk):
        told = upcoming(start) if upcoming is not None else []
        for sid, done in pipeline.push(queue[start : start + chunk], upcoming=told).items():
            rows[sid].extend(done)
    if flush:
        for sid, done in pipeline.flush().items():
            rows[sid].extend(done)
    for sid in sessions:
        rows[sid].extend(pipeline.finish(sid))
    return rows


def angle_gap(a: float, b: float) -> float:
    d = abs(a - b) % 180.0
    return min(d, 180.0 - d)


def assert_rows_match(got: Iterable[FrameResult], want: Iterable[FrameResult]) -> dict[str, float]:
    got, want = list(got), list(want)
    assert [r.frame for r in got] == [r.frame for r in want]
    assert [r.visible for r in got] == [r.visible for r in want]
    worst = {"xy_px": 0.0, "angle_deg": 0.0, "score_rel": 0.0}
    for g, w in zip(got, want):
        assert g.time_s == pytest.approx(w.time_s)
        worst["xy_px"] = max(worst["xy_px"], abs(g.x - w.x), abs(g.y - w.y))
        worst["angle_deg"] = max(worst["angle_deg"], angle_gap(g.blur_angle_deg, w.blur_angle_deg))
        worst["score_rel"] = max(worst["score_rel"], abs(g.score - w.score) / max(w.score, 1e-12))
        assert g.blur_length_px == pytest.approx(w.blur_length_px, rel=1e-5, abs=1e-5)
    assert worst["xy_px"] < CENTROID_PX and worst["angle_deg"] < ANGLE_DEG, worst
    assert worst["score_rel"] < 1e-5, worst
    return worst


def test_pipeline_matches_the_cpu_path_on_blobs(small_config: WeightsConfig) -> None:
    """Two sessions of other sizes and steps, frames interleaved in odd chunks: same rows."""
    backend = BrightBackend()
    sessions = {
        "a": (session_frames(14, (320, 180), streak=True), StreamOptions(step=3)),
        "b": (session_frames(11, (128, 72), streak=False), StreamOptions(step=1)),
        "c": (session_frames(10, (256, 144), streak=True), StreamOptions(step=1, threshold=0.7)),
    }
    pipeline = GpuPipeline(backend, small_config, decoder=JpegDecoder("cpu"), batch_sizes=(1, 2, 4))
    got = gpu_rows(pipeline, sessions, 60.0, chunk=5)
    for sid, (blobs, options) in sessions.items():
        want = cpu_rows(backend, small_config, blobs, options, 60.0)
        assert_rows_match(got[sid], want)
        assert sum(r.visible for r in want) >= len(want) // 2  # the ball leaves at the end
        assert any(r.blur_length_px > 5 for r in want) or sid == "b"
    assert pipeline.heatmaps > 0 and pipeline.fallbacks == 0
    assert len(pipeline) == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pipeline_on_cuda_with_graphs_matches_the_cpu_path(small_config: WeightsConfig) -> None:
    """On the GPU: post-processing from CUDA graphs, nvJPEG when torchvision is there (its
    pixels differ from cv2's by a few levels, so positions get 0.5 px there)."""
    sessions = {"a": (session_frames(14, (320, 180), streak=True), StreamOptions(step=3)),
                "b": (session_frames(11, (320, 180), streak=False), StreamOptions(step=1))}
    pipeline = GpuPipeline(BrightBackend("cuda"), small_config, batch_sizes=(1, 2, 4))
    got = gpu_rows(pipeline, sessions, 60.0, chunk=7)
    assert pipeline.graph_error is None
    for sid, (blobs, options) in sessions.items():
        want = cpu_rows(BrightBackend(), small_config, blobs, options, 60.0)
        if pipeline.decoder.kind == "cv2":
            assert_rows_match(got[sid], want)
        else:
            assert [r.visible for r in got[sid]] == [r.visible for r in want]
            assert max(abs(g.x - w.x) + abs(g.y - w.y) for g, w in zip(got[sid], want)) < 0.5


def test_post_processing_sees_only_warmed_batch_sizes(small_config: WeightsConfig,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A call of 3 windows is padded to 4 for the network and for the statistics too: their
    CUDA graph is then one of a warmed size, so a frozen pipeline (lanes) never runs them
    without a graph. The rows stay those of the CPU path."""
    pipeline = cpu_pipeline(small_config)
    seen: list[int] = []
    packed = pipeline._packed

    def spy(logits: Tensor, thresholds: Tensor) -> Tensor:
        assert thresholds.shape[0] == 3 * logits.shape[0]
        seen.append(logits.shape[0])
        return packed(logits, thresholds)

    monkeypatch.setattr(pipeline, "_packed", spy)
    sessions = {sid: (session_frames(10, (256, 144), streak=True), StreamOptions(step=1))
                for sid in "abc"}
    got = gpu_rows(pipeline, sessions, 60.0, chunk=9)  # three windows a call
    assert seen and set(seen) <= {1, 2, 4} and 4 in seen, seen
    for sid, (blobs, options) in sessions.items():
        assert_rows_match(got[sid], cpu_rows(BrightBackend(), small_config, blobs, options, 60.0))


def test_thresholds_are_uploaded_once_for_each_combination(
    small_config: WeightsConfig, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each call's thresholds (three a window) go to the device once for each combination of
    sessions' thresholds and are kept: the statistics see each window's own, and the rows stay
    the CPU path's, with two sessions of different thresholds in the same calls."""
    from ttball.kernels import prepost

    uploads: list[list[float]] = []
    real = prepost.host_to_device

    def counted(tensor: Tensor, device: torch.device) -> Tensor:
        uploads.append(tensor.tolist())
        return real(tensor, device)

    monkeypatch.setattr(prepost, "host_to_device", counted)
    pipeline = cpu_pipeline(small_config)
    seen: list[list[float]] = []
    packed = pipeline._packed

    def spy(logits: Tensor, thresholds: Tensor) -> Tensor:
        seen.append([round(t, 2) for t in thresholds.tolist()])
        return packed(logits, thresholds)

    monkeypatch.setattr(pipeline, "_packed", spy)
    sessions = {"a": (session_frames(10, (256, 144), streak=True), StreamOptions(step=1)),
                "b": (session_frames(10, (256, 144), streak=False),
                      StreamOptions(step=1, threshold=0.7))}
    got = gpu_rows(pipeline, sessions, 60.0, chunk=2)  # a window of each a call, from the third
    assert len(seen) > len(uploads) >= 1  # calls reuse the kept tensors
    assert len({tuple(u) for u in uploads}) == len(uploads)  # each combination once
    assert [0.5, 0.5, 0.5, 0.7, 0.7, 0.7] in seen  # each window its own session's
    for sid, (blobs, options) in sessions.items():
        assert_rows_match(got[sid], cpu_rows(BrightBackend(), small_config, blobs, options, 60.0))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_overlap_on_cuda_gives_the_serial_rows(small_config: WeightsConfig) -> None:
    """On the GPU, overlap decodes on a side stream and keeps batches in flight across pushes:
    the rows must be identical to the serial pipeline's (same kernels, same frames)."""
    sessions = {"a": (session_frames(14, (320, 180), streak=True), StreamOptions(step=3)),
                "b": (session_frames(11, (320, 180), streak=False), StreamOptions(step=1))}
    serial = gpu_rows(GpuPipeline(BrightBackend("cuda"), small_config, batch_sizes=(1, 2)),
                      sessions, 60.0, chunk=7)
    overlap = GpuPipeline(BrightBackend("cuda"), small_config, batch_sizes=(1, 2), overlap=True)
    assert overlap._side.priority < 0  # scheduled ahead of the network's kernels
    got = gpu_rows(overlap, sessions, 60.0, chunk=7)
    assert {sid: [r.as_dict() for r in rows] for sid, rows in got.items()} == \
        {sid: [r.as_dict() for r in rows] for sid, rows in serial.items()}
    deep = GpuPipeline(BrightBackend("cuda"), small_config, batch_sizes=(1, 2), overlap=True,
                       depth=2)  # two pushes' batches in flight: their buffers must not clash
    got = gpu_rows(deep, sessions, 60.0, chunk=7)
    assert {sid: [r.as_dict() for r in rows] for sid, rows in got.items()} == \
        {sid: [r.as_dict() for r in rows] for sid, rows in serial.items()}
    # the statistics on a stream of their own (a backend whose outputs are its own), at depth
    # 1 and 2: the same rows; without fresh outputs the option does nothing
    assert not GpuPipeline(BrightBackend("cuda"), small_config, batch_sizes=(1, 2), overlap=True,
                           stats_stream=True).stats_stream
    for depth in (1, 2):
        split = GpuPipeline(GraphedBright(), small_config, batch_sizes=(1, 2), overlap=True,
                            depth=depth, stats_stream=True)
        assert split.stats_stream
        got = gpu_rows(split, sessions, 60.0, chunk=7)
        assert {sid: [r.as_dict() for r in rows] for sid, rows in got.items()} == \
            {sid: [r.as_dict() for r in rows] for sid, rows in serial.items()}, depth
    # a push's windows past its full calls carried to the next (the worker's graphed backend,
    # the statistics on their own stream): the same rows, some windows carried
    carried = GpuPipeline(GraphedBright(), small_config, batch_sizes=(1, 2), overlap=True,
                          stats_stream=True, carry=True)
    got = gpu_rows(carried, sessions, 60.0, chunk=7)
    assert carried.windows_carried > 0
    assert {sid: [r.as_dict() for r in rows] for sid, rows in got.items()} == \
        {sid: [r.as_dict() for r in rows] for sid, rows in serial.items()}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("stats_stream", [False, True])
def test_overlap_launch_never_waits_for_the_gpu(small_config: WeightsConfig,
                                                monkeypatch: pytest.MonkeyPatch,
                                                stats_stream: bool) -> None:
    """What overlap is for: launching a push's batches (normalise, network, statistics, their
    copy to the host) makes no synchronizing CUDA call, so the host goes on to the next push
    while the GPU works (``set_sync_debug_mode("error")`` raises on one)."""
    backend = GraphedBright() if stats_stream else BrightBackend("cuda")
    pipeline = GpuPipeline(backend, small_config, batch_sizes=(1, 2), overlap=True,
                           stats_stream=stats_stream)
    assert pipeline.stats_stream is stats_stream
    pipeline.open("s", StreamOptions(step=1), 60.0)
    blobs = [jpeg(draw(i, (320, 180), True)) for i in range(8)]
    pipeline.push([("s", b) for b in blobs[:4]])  # two windows: captures the graphs of size 2
    pipeline.flush()
    launch = pipeline._launch

    def checked(windows: list) -> object:
        torch.cuda.set_sync_debug_mode("error")
        try:
            return launch(windows)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(pipeline, "_launch", checked)
    rows = [r for k in (4, 6) for r in pipeline.push([("s", b) for b in blobs[k : k + 2]])["s"]]
    rows += pipeline.finish("s")
    assert [r.frame for r in rows] == list(range(2, 8))


@pytest.mark.parametrize("name", ["eager-fp32", "eager-fp32-cl"])  # -cl: channels_last logits
def test_pipeline_matches_the_cpu_path_with_a_random_model(
    small_config: WeightsConfig, small_model: torch.nn.Module, one_cpu_thread: None, name: str
) -> None:
    """The tiny random-weight network: heatmaps near 0.5 everywhere, so blobs of every shape
    (many maps need the host fallback): results must still be equal."""
    backend = create(name, small_model, "cpu")
    sessions = {
        "a": (session_frames(9, (320, 180), streak=True), StreamOptions(step=3, threshold=0.51)),
        "b": (session_frames(9, (320, 180), streak=False), StreamOptions(step=3)),
    }
    pipeline = GpuPipeline(backend, small_config, decoder=JpegDecoder("cpu"), batch_sizes=(1, 4),
                           post=PostOptions(max_blobs=4))
    got = gpu_rows(pipeline, sessions, 30.0, chunk=18)
    for sid, (blobs, options) in sessions.items():
        assert_rows_match(got[sid], cpu_rows(backend, small_config, blobs, options, 30.0))
    assert 0 < pipeline.fallbacks < pipeline.heatmaps


@pytest.mark.parametrize("flush", [False, True])
def test_overlap_gives_the_serial_rows_one_push_later(small_config: WeightsConfig, flush: bool) -> None:
    """overlap=True: the same rows per session as without it (finish or flush collects what
    the last push left running), but a push returns the rows its own windows finish only at
    the next push."""
    sessions = {
        "a": (session_frames(14, (320, 180), streak=True), StreamOptions(step=3)),
        "b": (session_frames(11, (128, 72), streak=False), StreamOptions(step=1)),
    }
    serial = gpu_rows(cpu_pipeline(small_config), sessions, 60.0, chunk=5)
    overlap = cpu_pipeline(small_config, overlap=True)
    got = gpu_rows(overlap, sessions, 60.0, chunk=5, flush=flush)
    for sid in sessions:
        assert_rows_match(got[sid], serial[sid])
        assert len(got[sid]) == len(sessions[sid][0])
    assert overlap.in_flight == 0 and len(overlap) == 0

    # step 1: the fourth frame's window makes frames 0-1 final, but only once it is read back
    pipeline = cpu_pipeline(small_config, overlap=True)
    blobs = [jpeg(draw(i, (320, 180), True)) for i in range(6)]
    pipeline.open("s", StreamOptions(step=1), 60.0)
    assert pipeline.push([("s", b) for b in blobs[:4]]) == {"s": []}
    assert pipeline.in_flight == 2
    assert [r.frame for r in pipeline.push([("s", blobs[4])])["s"]] == [0, 1]
    assert pipeline.in_flight == 1
    assert [r.frame for r in pipeline.flush()["s"]] == [2]
    assert pipeline.in_flight == 0 and pipeline.flush() == {}
    assert [r.frame for r in pipeline.finish("s")] == [3, 4]


@pytest.mark.parametrize("flush", [False, True])
def test_carry_gives_the_serial_rows_with_full_calls(small_config: WeightsConfig,
                                                      flush: bool) -> None:
    """carry=True: a push whose windows fill more than one call launches the full calls and
    leaves the rest to the next push, so under load the calls are full; every session's rows
    stay those of the serial pipeline."""
    sessions = {
        "a": (session_frames(14, (320, 180), streak=True), StreamOptions(step=1)),
        "b": (session_frames(11, (128, 72), streak=False), StreamOptions(step=1)),
        "c": (session_frames(13, (320, 180), streak=False), StreamOptions(step=3)),
    }
    serial = gpu_rows(cpu_pipeline(small_config), sessions, 60.0, chunk=7)
    calls: dict[bool, list[int]] = {}
    for carry in (False, True):
        sizes = calls[carry] = []
        pipeline = cpu_pipeline(small_config, overlap=True, carry=carry,
                                on_batch=lambda n, size, sizes=sizes: sizes.append(n))
        got = gpu_rows(pipeline, sessions, 60.0, chunk=7, flush=flush)
        for sid in sessions:
            assert_rows_match(got[sid], serial[sid])
            assert len(got[sid]) == len(sessions[sid][0])
        assert pipeline.in_flight == 0 and len(pipeline) == 0
        assert pipeline.pushes_done == pipeline.pushes_launched
        assert (pipeline.windows_carried > 0) is carry
    # the same windows in fewer calls, fewer of them short of the largest size (4)
    assert sum(calls[True]) == sum(calls[False])
    assert len(calls[True]) < len(calls[False])
    assert sum(n < 4 for n in calls[True]) < sum(n < 4 for n in calls[False])


def test_carry_leaves_the_rest_of_a_push_to_the_next(small_config: WeightsConfig) -> None:
    """Step by step, calls of at most 2: the third window waits for the next push (whose own
    window joins it in one call), or for a flush; a closed session's carried window is dropped."""
    sizes: list[int] = []
    pipeline = GpuPipeline(BrightBackend(), small_config, decoder=JpegDecoder("cpu"),
                           batch_sizes=(1, 2), overlap=True, carry=True,
                           on_batch=lambda n, size: sizes.append(n))
    a, b = ([jpeg(draw(i, (320, 180), streak)) for i in range(8)] for streak in (True, False))
    pipeline.open("a", StreamOptions(step=1), 60.0)
    assert pipeline.push([("a", blob) for blob in a[:5]]) == {"a": []}  # windows 2, 3, 4
    assert sizes == [2] and pipeline.in_flight == 3 and pipeline.carried_sessions == {"a"}
    assert (pipeline.pushes_launched, pipeline.windows_carried) == (1, 1)
    # the first call read back (frame 2 waits for the carried window 4); the carried window
    # and this push's own (5) in one call
    assert [r.frame for r in pipeline.push([("a", a[5])])["a"]] == [0, 1]
    assert sizes == [2, 2] and pipeline.carried_sessions == set()
    assert [r.frame for r in pipeline.push([("a", blob) for blob in a[6:8]])["a"]] == [2, 3]
    assert sizes == [2, 2, 2] and pipeline.carried_sessions == set()
    assert [r.frame for r in pipeline.flush()["a"]] == [4, 5]
    # a push of three windows, then its carried window launched by flush alone
    pipeline.open("b", StreamOptions(step=1), 60.0)
    pipeline.push([("b", blob) for blob in b[:5]])
    assert pipeline.carried_sessions == {"b"}
    launched = pipeline.pushes_launched
    assert [r.frame for r in pipeline.flush()["b"]] == [0, 1, 2]
    assert pipeline.pushes_launched == launched + 1 == pipeline.pushes_done
    assert sizes[-2:] == [2, 1] and pipeline.in_flight == 0
    # closing a session drops its carried window
    pipeline.open("c", StreamOptions(step=1), 60.0)
    pipeline.push([("c", blob) for blob in b[:5]])
    assert pipeline.carried_sessions == {"c"} and pipeline.in_flight == 3
    pipeline.close("c")
    assert pipeline.carried_sessions == set() and pipeline.in_flight == 2
    assert pipeline.flush() == {}
    assert [r.frame for r in pipeline.finish("a")] == [6, 7]
    assert [r.frame for r in pipeline.finish("b")] == [3, 4]
    # without overlap there is nothing to carry to
    assert cpu_pipeline(small_config, carry=True).carry is False

@pytest.mark.parametrize("flush", [False, True])
def test_depth_two_gives_the_serial_rows_two_pushes_later(small_config: WeightsConfig,
                                                          flush: bool) -> None:
    """overlap with depth=2: the same rows again, but a push reads back the batches of the
    push before the previous one, so two pushes' batches stay in flight."""
    sessions = {
        "a": (session_frames(14, (320, 180), streak=True), StreamOptions(step=3)),
        "b": (session_frames(11, (128, 72), streak=False), StreamOptions(step=1)),
    }
    serial = gpu_rows(cpu_pipeline(small_config), sessions, 60.0, chunk=5)
    deep = cpu_pipeline(small_config, overlap=True, depth=2)
    got = gpu_rows(deep, sessions, 60.0, chunk=5, flush=flush)
    for sid in sessions:
        assert_rows_match(got[sid], serial[sid])
    assert deep.in_flight == 0 and deep.pushes_done == deep.pushes_launched > 2
    # postprocess's parts (no CUDA event to wait for on the CPU: no post_wait)
    parts = {"post_launch", "post_read"}
    assert parts <= set(deep.timer.seconds) and "post_wait" not in deep.timer.seconds
    assert sum(deep.timer.seconds[p] for p in parts) <= deep.timer.seconds["postprocess"] + 1e-3

    pipeline = cpu_pipeline(small_config, overlap=True, depth=2)
    blobs = [jpeg(draw(i, (320, 180), True)) for i in range(7)]
    pipeline.open("s", StreamOptions(step=1), 60.0)
    assert pipeline.push([("s", b) for b in blobs[:4]]) == {"s": []}  # windows 2, 3 launched
    assert pipeline.push([("s", blobs[4])]) == {"s": []}  # the first push's still in flight
    assert pipeline.in_flight == 3 and (pipeline.pushes_launched, pipeline.pushes_done) == (2, 0)
    assert [r.frame for r in pipeline.push([("s", blobs[5])])["s"]] == [0, 1]
    assert pipeline.in_flight == 2 and pipeline.pushes_done == 1
    assert [r.frame for r in pipeline.flush()["s"]] == [2, 3]
    assert pipeline.in_flight == 0 and pipeline.pushes_done == 3
    assert [r.frame for r in pipeline.finish("s")] == [4, 5]
    with pytest.raises(ValueError, match="depth must be in 1..4"):
        cpu_pipeline(small_config, overlap=True, depth=0)


class _Mark:
    """A completed event at ``t`` seconds: ``elapsed_time`` in milliseconds, as CUDA's."""

    def __init__(self, t: float) -> None:
        self.t = t

    def elapsed_time(self, other: _Mark) -> float:
        return (other.t - self.t) * 1e3


def test_gpu_split_reads_each_step_between_its_events() -> None:
    marks = (("start", _Mark(1.0)), ("normalize", _Mark(1.25)), ("network", _Mark(3.25)),
             ("stats_upload", _Mark(3.3)), ("stats_graph", _Mark(3.4)),
             ("stats_clone", _Mark(3.45)))
    split = gpu_split(marks, _Mark(3.5), previous_end=_Mark(0.5))
    assert split == pytest.approx({"gpu_between": 0.5, "gpu_normalize": 0.25,
                                   "gpu_network": 2.0, "gpu_stats": 0.25,
                                   "gpu_stats_upload": 0.05, "gpu_stats_graph": 0.1,
                                   "gpu_stats_clone": 0.05, "gpu_stats_to_host": 0.05})
    assert set(split) <= set(GPU_STAGES) | set(GPU_STEPS)
    assert "gpu_between" not in gpu_split(marks, _Mark(3.5), previous_end=None)


def test_gpu_split_splits_the_network_where_the_backend_marks_it() -> None:
    """A CUDA-graph backend's marks split ``gpu_network`` into the copy in, the graph and the
    copy out, which add up to it."""
    marks = (("start", _Mark(0.0)), ("normalize", _Mark(1.0)), ("net_copy_in", _Mark(1.5)),
             ("net_graph", _Mark(4.0)), ("network", _Mark(4.25)), ("stats_upload", _Mark(5.0)),
             ("stats_graph", _Mark(5.0)), ("stats_clone", _Mark(5.0)))
    split = gpu_split(marks, _Mark(6.0), previous_end=None)
    assert split["gpu_network"] == pytest.approx(3.25)
    assert (split["gpu_net_copy_in"], split["gpu_net_graph"], split["gpu_net_copy_out"]) \
        == pytest.approx((0.5, 2.5, 0.25))
    assert split["gpu_stats"] == pytest.approx(1.75) == split["gpu_stats_upload"] + 1.0
    assert set(split) == set(GPU_STEPS) | set(GPU_STAGES) - {"gpu_between"}


def test_the_pipeline_on_the_cpu_times_no_gpu_stages(small_config: WeightsConfig) -> None:
    pipeline = cpu_pipeline(small_config, overlap=True)
    gpu_rows(pipeline, {"a": (session_frames(9, (320, 180), streak=True), StreamOptions(step=1))},
             60.0, chunk=4)
    assert "network" in pipeline.timer.seconds
    assert not (set(GPU_STAGES) | set(GPU_STEPS)) & set(pipeline.timer.seconds)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_overlap_on_cuda_times_each_call_on_its_stream(small_config: WeightsConfig) -> None:
    """Each call read back adds its normalisation, network and statistics time on the GPU, and
    from the second call on the stream's time since the previous call's end."""
    pipeline = GpuPipeline(BrightBackend("cuda"), small_config, batch_sizes=(1, 2), overlap=True)
    start = time.perf_counter()
    gpu_rows(pipeline, {"a": (session_frames(12, (320, 180), streak=True), StreamOptions(step=1))},
             60.0, chunk=3)
    wall = time.perf_counter() - start
    seconds = pipeline.timer.seconds
    assert set(GPU_STAGES) <= set(seconds)
    assert seconds["gpu_network"] > 0 and all(seconds[s] >= 0 for s in GPU_STAGES)
    assert sum(seconds[s] for s in GPU_STAGES) < wall  # one stream's time: within the run's
    steps = {"gpu_stats_upload", "gpu_stats_graph", "gpu_stats_clone", "gpu_stats_to_host"}
    assert steps <= set(seconds)  # no graphed backend: the network is not split
    assert sum(seconds[s] for s in steps) == pytest.approx(seconds["gpu_stats"], rel=1e-3)
    assert "gpu_net_graph" not in seconds


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kernel_copies", [False, True], ids=["memcpy", "kernel"])
def test_a_graphed_backend_splits_the_network_on_cuda(
        small_config: WeightsConfig, monkeypatch: pytest.MonkeyPatch, kernel_copies: bool) -> None:
    """With a CUDA-graph backend the network's time splits into its copy in, graph and copy
    out (``GraphedBackend.set_marker``), which add up to it, with the copies as memcpys or, with
    ``TTBALL_KERNEL_COPIES=1``, kernels; the rows are the serial pipeline's either way."""
    if kernel_copies:
        monkeypatch.setenv("TTBALL_KERNEL_COPIES", "1")
    sessions = {"a": (session_frames(12, (320, 180), streak=True), StreamOptions(step=1))}
    backend = GraphedBright()
    want = gpu_rows(GpuPipeline(backend, small_config, batch_sizes=(1, 2)), sessions, 60.0, chunk=3)
    pipeline = GpuPipeline(backend, small_config, batch_sizes=(1, 2), overlap=True)
    got = gpu_rows(pipeline, sessions, 60.0, chunk=3)
    assert_rows_match(got["a"], want["a"])
    seconds = pipeline.timer.seconds
    parts = ("gpu_net_copy_in", "gpu_net_graph", "gpu_net_copy_out")
    assert seconds["gpu_net_graph"] > 0
    assert sum(seconds[s] for s in parts) == pytest.approx(seconds["gpu_network"], rel=1e-3)


@pytest.mark.parametrize("early", [False, True], ids=["after", "early"])
def test_decode_ahead_gives_the_same_rows_and_is_taken_when_told_right(
        small_config: WeightsConfig, early: bool) -> None:
    """Each push told the next push's frames: its decode prefetched in the decode processes and
    taken by the next push (the clip's repeated bytes skipped there as in a push); told other
    frames, each prefetch is dropped. The rows are the same either way, and whether the next
    push's decode is sent after this push's is read or before (``decode_early``)."""
    sessions = {
        "a": (session_frames(14, (320, 180), streak=True), StreamOptions(step=3)),
        "b": (session_frames(11, (128, 72), streak=False), StreamOptions(step=1)),
    }
    queue = [(sid, blobs[k]) for k in range(14) for sid, (blobs, _) in sessions.items()
             if k < len(blobs)]
    want = gpu_rows(cpu_pipeline(small_config), sessions, 60.0, chunk=5)
    decoder = DecoderProcess("cpu", library="cv2", processes=2)
    try:
        pipeline = GpuPipeline(BrightBackend(), small_config, decoder=decoder,  # type: ignore[arg-type]
                               batch_sizes=(1, 2, 4), overlap=True, decode_early=early)
        got = gpu_rows(pipeline, sessions, 60.0, chunk=5,
                       upcoming=lambda start: queue[start + 5 : start + 10])
        pushes = -(-len(queue) // 5)
        assert (decoder.ahead_hits, decoder.ahead_misses) == (pushes - 1, 0)
        for sid in sessions:
            assert_rows_match(got[sid], want[sid])
        wrong = GpuPipeline(BrightBackend(), small_config, decoder=decoder,  # type: ignore[arg-type]
                            batch_sizes=(1, 2, 4), decode_early=early)
        got = gpu_rows(wrong, sessions, 60.0, chunk=5,
                       upcoming=lambda start: queue[start + 6 : start + 11])
        assert decoder.ahead_hits == pushes - 1 and decoder.ahead_misses >= pushes - 2
        for sid in sessions:
            assert_rows_match(got[sid], want[sid])
    finally:
        decoder.close()


def test_frames_decoded_on_arrival_give_the_same_rows_undecoded_again(
        small_config: WeightsConfig) -> None:
    """``decoded`` (serve --decode-on-arrival): a push takes the frames decoded already and
    decodes only the rest (None: one frame it decodes itself); the rows are those of pushes
    that decode everything. A decoded frame of another size is refused as any frame is, and
    nothing is taken; a ``decoded`` that does not cover the push is a ValueError."""
    sessions = {
        "a": (session_frames(14, (320, 180), streak=True), StreamOptions(step=3)),
        "b": (session_frames(11, (128, 72), streak=False), StreamOptions(step=1)),
    }
    want = gpu_rows(cpu_pipeline(small_config), sessions, 60.0, chunk=5)
    decoded_here: list[int] = []

    class Counting(JpegDecoder):
        def __call__(self, blobs):  # type: ignore[no-untyped-def]
            decoded_here.append(len(blobs))
            return super().__call__(blobs)

    arrival = ArrivalDecoder("cpu")
    pipeline = GpuPipeline(BrightBackend(), small_config, decoder=Counting("cpu"),
                           batch_sizes=(1, 2, 4), overlap=True)
    queue = [(sid, blobs[k]) for k in range(14) for sid, (blobs, _) in sessions.items()
             if k < len(blobs)]
    rows: dict[str, list[FrameResult]] = {sid: [] for sid in sessions}
    for sid, (_, options) in sessions.items():
        pipeline.open(sid, options, 60.0)
    try:
        for start in range(0, len(queue), 5):
            push = queue[start : start + 5]
            # the first frame of each push left to the push, the others decoded on arrival as
            # the worker sends them (one request an upload of one frame)
            runs = [None] + [arrival.submit([blob]).result(timeout=10) for _, blob in push[1:]]
            for sid, done in pipeline.push(push, decoded=runs).items():
                rows[sid].extend(done)
        for sid, done in pipeline.flush().items():
            rows[sid].extend(done)
        for sid in sessions:
            rows[sid].extend(pipeline.finish(sid))
            assert_rows_match(rows[sid], want[sid])
        # one frame a push decoded here, less the repeated bytes of session a (its frame 4)
        assert sum(decoded_here) <= -(-len(queue) // 5) and max(decoded_here) == 1
        pipeline.open("c", StreamOptions(step=1), 60.0)
        first = jpeg(draw(0, (320, 180), False))
        pipeline.push([("c", first)], decoded=[arrival.submit([first]).result(timeout=10)])
        small = arrival.submit([jpeg(draw(1, (160, 90), False))]).result(timeout=10)
        with pytest.raises(ValueError, match="160x90"):
            pipeline.push([("c", b"not decoded: its frame comes decoded")], decoded=[small])
        with pytest.raises(ValueError, match="covers 2 frames of the push's 1"):
            pipeline.push([("c", first)], decoded=[None, None])
        later = [jpeg(draw(i, (320, 180), False)) for i in range(1, 4)]
        rest = pipeline.push([("c", blob) for blob in later],
                             decoded=[arrival.submit(later).result(timeout=10)])["c"]
        rest += pipeline.flush().get("c", []) + pipeline.finish("c")
        assert [r.frame for r in rest] == [0, 1, 2, 3]  # the refused frame left no trace
    finally:
        arrival.close()


def test_compiled_resize_gives_the_same_rows(small_config: WeightsConfig) -> None:
    """resize="compile" (``serve --pipeline-resize compile``): the torch.compile'd resize is
    bit-exact, so the rows are the eager pipeline's; one compile serves two source sizes and
    every batch size (about 7 s on two CPU cores)."""
    sessions = {
        "a": (session_frames(12, (320, 180), streak=True), StreamOptions(step=3)),
        "b": (session_frames(10, (256, 144), streak=False), StreamOptions(step=1)),
    }
    eager = gpu_rows(cpu_pipeline(small_config), sessions, 60.0, chunk=5)
    compiled = cpu_pipeline(small_config, resize="compile")
    got = gpu_rows(compiled, sessions, 60.0, chunk=5)
    assert compiled.resizer.compiled and compiled.resizer.compile_error is None
    assert {sid: [r.as_dict() for r in rows] for sid, rows in got.items()} == \
        {sid: [r.as_dict() for r in rows] for sid, rows in eager.items()}


class KeptOutputs(BrightBackend):
    """BrightBackend remembering each output it returned."""

    def __init__(self, fresh: bool) -> None:
        super().__init__()
        self.fresh_outputs, self.outputs = fresh, []

    def run(self, batch: Tensor) -> Tensor:
        self.outputs.append(super().run(batch))
        return self.outputs[-1]


@pytest.mark.parametrize("fresh", [False, True], ids=["copied", "kept"])
def test_overlap_copies_the_logits_it_keeps_unless_the_backend_says_they_are_its_own(
        small_config: WeightsConfig, fresh: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The logits a call leaves in flight are a private copy, unless the backend's outputs are
    fresh (``fresh_outputs``: a CUDA-graph backend's clones), where the copy is skipped;
    ``TTBALL_PIPELINE_CLONE=1`` copies anyway. The rows are the same."""
    sessions = {"a": (session_frames(9, (320, 180), streak=True), StreamOptions(step=1))}
    want = gpu_rows(cpu_pipeline(small_config), sessions, 60.0, chunk=4)
    for forced in (False, True):
        if forced:
            monkeypatch.setenv("TTBALL_PIPELINE_CLONE", "1")
        backend = KeptOutputs(fresh)
        pipeline = GpuPipeline(backend, small_config, decoder=JpegDecoder("cpu"),  # type: ignore[arg-type]
                               batch_sizes=(1, 2, 4), overlap=True)
        pipeline.open("a", StreamOptions(step=1), 60.0)
        pipeline.push([("a", blob) for blob in sessions["a"][0][:5]])
        ((flight,),) = pipeline._pending  # one push of one call
        shared = flight.logits.data_ptr() == backend.outputs[-1].data_ptr()
        assert shared == (fresh and not forced)
        pipeline.close("a")
        got = gpu_rows(GpuPipeline(KeptOutputs(fresh), small_config, decoder=JpegDecoder("cpu"),  # type: ignore[arg-type]
                                   batch_sizes=(1, 2, 4), overlap=True), sessions, 60.0, chunk=4)
        assert_rows_match(got["a"], want["a"])
    assert GraphedBackend.fresh_outputs and not BackendBase.fresh_outputs


def test_overlap_drops_the_windows_of_a_session_closed_in_flight(small_config: WeightsConfig) -> None:
    pipeline = cpu_pipeline(small_config, overlap=True)
    a, b = ([jpeg(draw(i, (320, 180), streak)) for i in range(6)] for streak in (True, False))
    for sid in "ab":
        pipeline.open(sid, StreamOptions(step=3), 60.0)
    pipeline.push([(sid, blob) for k in range(6) for sid, blob in (("a", a[k]), ("b", b[k]))])
    assert pipeline.in_flight == 4
    pipeline.close("b")
    rows = pipeline.flush()
    assert list(rows) == ["a"] and [r.frame for r in rows["a"]] == [0, 1, 2, 3, 4, 5]
    assert pipeline.finish("a") == []
    assert len(pipeline) == 0


def test_pipeline_refuses_what_it_cannot_do(small_config: WeightsConfig) -> None:
    pipeline = GpuPipeline(BrightBackend(), small_config, decoder=JpegDecoder("cpu"))
    with pytest.raises(ValueError, match="dedup_ssim"):
        pipeline.open("s", StreamOptions(dedup_ssim=0.99))
    pipeline.open("s")
    with pytest.raises(ValueError, match="already open"):
        pipeline.open("s")
    pipeline.push([("s", jpeg(draw(0, (320, 180), False)))])
    with pytest.raises(ValueError, match="160x90"):
        pipeline.push([("s", jpeg(draw(1, (160, 90), False)))])
    with pytest.raises(KeyError):
        pipeline.push([("nobody", b"")])
    # the refused frame left no trace: the session goes on
    rows = pipeline.push([("s", jpeg(draw(i, (320, 180), False))) for i in range(1, 4)])["s"]
    rows += pipeline.finish("s")
    assert [r.frame for r in rows] == [0, 1, 2, 3]


def test_warm_resize_compiles_every_graph_a_worker_needs() -> None:
    """After ``Resizer.warm`` no frame count or source size compiles again: a lone frame
    (Dynamo's size-1 specialization) used to cost a 2-5 s push under load."""
    from torch._dynamo.utils import counters

    from ttball.kernels.prepost_image import Resizer

    resize = Resizer(36, 64, mode="compile")
    resize.warm(torch.device("cpu"))
    graphs = counters["stats"]["unique_graphs"]
    for count, h, w in ((1, 72, 128), (3, 72, 128), (7, 90, 160), (1, 144, 256)):
        frames = torch.randint(0, 255, (count, 3, h, w), dtype=torch.uint8)
        assert torch.equal(resize(frames), Resizer(36, 64)(frames))
    assert counters["stats"]["unique_graphs"] == graphs and resize.compile_error is None


def test_stage_timer_tells_a_stage_s_cpu_time_from_its_wait() -> None:
    timer = StageTimer(torch.device("cpu"))
    with timer.stage("wait"):
        time.sleep(0.05)
    with timer.stage("work"):
        # spins until this thread has had 50 ms of CPU, however long a loaded host makes it
        # wait for them (a spin of 50 ms wall time got 12 ms of CPU beside a full test run)
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass
    assert timer.seconds["wait"] >= 0.05 and timer.cpu_seconds["wait"] < 0.02
    assert 0.05 <= timer.cpu_seconds["work"] <= timer.seconds["work"] + 0.01
    assert timer.cpu_seconds["work"] <= timer.seconds["work"] + 0.005


def test_a_bad_fused_windows_level_is_refused_when_the_pipeline_is_made(
        small_config: WeightsConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """TTBALL_FUSED_WINDOWS is read when the pipeline is made (not in its first capture); on
    the CPU the level in effect is 0, the PyTorch ops."""
    from ttball.kernels.prepost_post import FUSED_WINDOWS_ENV

    monkeypatch.setenv(FUSED_WINDOWS_ENV, "3")
    with pytest.raises(ValueError, match=FUSED_WINDOWS_ENV):
        cpu_pipeline(small_config)
    monkeypatch.setenv(FUSED_WINDOWS_ENV, "1")
    assert cpu_pipeline(small_config).fused_windows == 0


def test_pad_kernels_are_read_from_the_environment(small_config: WeightsConfig,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """TTBALL_PAD_KERNELS and TTBALL_PAD_MATMULS: a bad count is refused when the pipeline is
    made; on the CPU there is nothing to pad (no CUDA graph)."""
    from ttball.kernels.prepost import PAD_KERNELS_ENV, PAD_MATMULS_ENV

    for name in (PAD_KERNELS_ENV, PAD_MATMULS_ENV):
        for bad in ("0", "-3", "many"):
            monkeypatch.setenv(name, bad)
            with pytest.raises(ValueError, match=name):
                cpu_pipeline(small_config)
        monkeypatch.setenv(name, "5")
        assert cpu_pipeline(small_config)._pad is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pad_matmuls_run_off_the_callers_stream() -> None:
    """TTBALL_PAD_MATMULS' products (~0.19 ms each on an H200) replay on a stream of their own:
    the caller's stream is done long before them, and they do run."""
    from ttball.kernels.prepost import PadKernels

    pad = PadKernels(0, torch.device("cuda"), matmuls=50)
    torch.cuda.synchronize()
    pad()
    mine = torch.cuda.Event()
    mine.record()
    mine.synchronize()
    assert not pad._stream.query()  # ~9 ms of products still running
    pad._stream.synchronize()
    a, b, out = pad._mats
    assert torch.allclose(out.float(), (a.float() @ b.float()), rtol=1e-2, atol=1.0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("level", ["1", "2"])
def test_fused_windows_and_pad_kernels_on_cuda_keep_the_rows(small_config: WeightsConfig,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            level: str) -> None:
    """On the GPU, with TTBALL_FUSED_WINDOWS=1 or 2 (the window statistics as Triton kernels,
    float64 sums in another order; 2 is the default), TTBALL_PAD_KERNELS=7 and
    TTBALL_PAD_MATMULS=2 (empty kernels and matrix products after each call's statistics): the
    rows of the overlapped pipeline with the statistics' PyTorch ops (TTBALL_FUSED_WINDOWS=0),
    positions to 1e-6 px."""
    from ttball.kernels.prepost import PAD_KERNELS_ENV, PAD_MATMULS_ENV
    from ttball.kernels.prepost_post import FUSED_WINDOWS_ENV

    sessions = {"a": (session_frames(14, (320, 180), streak=True), StreamOptions(step=3)),
                "b": (session_frames(11, (320, 180), streak=False), StreamOptions(step=1))}
    monkeypatch.setenv(FUSED_WINDOWS_ENV, "0")
    want = gpu_rows(GpuPipeline(GraphedBright(), small_config, batch_sizes=(1, 2), overlap=True),
                    sessions, 60.0, chunk=7)
    monkeypatch.setenv(FUSED_WINDOWS_ENV, level)
    monkeypatch.setenv(PAD_KERNELS_ENV, "7")
    monkeypatch.setenv(PAD_MATMULS_ENV, "2")
    pipeline = GpuPipeline(GraphedBright(), small_config, batch_sizes=(1, 2), overlap=True)
    assert pipeline._pad is not None and (pipeline._pad.count, pipeline._pad.matmuls) == (7, 2)
    assert pipeline.fused_windows == int(level)
    got = gpu_rows(pipeline, sessions, 60.0, chunk=7)
    assert pipeline.graph_error is None
    for sid in sessions:
        assert [r.visible for r in got[sid]] == [r.visible for r in want[sid]]
        assert max(abs(g.x - w.x) + abs(g.y - w.y)
                   for g, w in zip(got[sid], want[sid]) if w.visible) < 1e-6
        assert any(r.visible for r in want[sid])


def test_a_flush_reads_back_only_the_pushes_it_waited_for(small_config: WeightsConfig) -> None:
    """``wait_in_flight`` returns the pushes in flight; a flush given them reads those back and
    leaves a push launched since to the next flush (``serve --flush-thread``: it never waits
    for the GPU holding the lock); every row still comes once, in frame order."""
    pipeline = cpu_pipeline(small_config, overlap=True)
    pipeline.open("s", StreamOptions(step=1), 60.0)
    blobs = [jpeg(draw(i, (320, 180), True)) for i in range(7)]
    rows = pipeline.push([("s", b) for b in blobs[:4]])["s"]  # two windows left in flight
    waited = pipeline.wait_in_flight()
    assert len(waited) == 1 and pipeline.in_flight == 2
    rows += pipeline.push([("s", b) for b in blobs[4:6]])["s"]  # reads the first back itself
    assert pipeline.in_flight == 2 and pipeline.pushes_done == 1
    assert pipeline.flush(waited=waited) == {}  # what it waited for is read back already
    assert pipeline.in_flight == 2
    waited = pipeline.wait_in_flight()
    rows += pipeline.push([("s", blobs[6])])["s"]  # reads the second back; one in flight
    rows += pipeline.flush(waited=waited).get("s", [])  # nothing of the third
    assert pipeline.in_flight == 1
    rows += pipeline.flush()["s"]
    assert pipeline.in_flight == 0
    rows += pipeline.finish("s")
    assert [r.frame for r in rows] == list(range(7))

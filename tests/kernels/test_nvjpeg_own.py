"""The nvjpeg-own decoder on a GPU (skipped without one): its pixels against torchvision's nvJPEG
(the default decoder, which this one must match), a progressive frame (which the JPEG engines
refuse) alone and inside a batch, a bad frame named, and the call returning while another
stream's kernel still runs (the wait the decoder exists to avoid).
``scripts/gpu_decode_waits.py --decoder nvjpeg-own`` shows the driver calls; these say whether it
works.

OpenCV is no reference for the pixels: on these frames of saturated colour both nvJPEG decoders
differ from libjpeg by ~5 levels on average (4.83-4.93 a frame, the same for both, on an H200 in
the fifty-second session: ``pytest -m gpu -s -k opencv`` here prints them), while they differ from
each other by at most 2."""

from __future__ import annotations

import time

import cv2
import numpy as np
import pytest
import torch

from ttball.kernels.prepost_image import DecodeError, JpegDecoder

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def own() -> JpegDecoder:
    decoder = JpegDecoder("cuda", library="nvjpeg-own")
    if decoder.kind != "nvjpeg-own":
        pytest.fail(f"nvjpeg-own fell back to {decoder.kind}: {decoder.gpu_reason}")
    return decoder


@pytest.fixture(scope="module")
def theirs() -> JpegDecoder:
    return JpegDecoder("cuda", library="nvjpeg")


def assert_close(mine: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(mine) == len(want)
    for a, b in zip(mine, want):
        assert a.shape == b.shape and a.dtype == torch.uint8 and a.is_cuda
        assert (a.int() - b.int()).abs().max().item() <= 2


def frames(n: int, width: int = 320, height: int = 180, progressive: bool = False) -> list[bytes]:
    rng = np.random.default_rng(n)
    out = []
    for _ in range(n):
        small = rng.integers(0, 256, (height // 10, width // 10, 3), dtype=np.uint8)
        bgr = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
        params = [cv2.IMWRITE_JPEG_QUALITY, 90,
                  cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive)]
        out.append(cv2.imencode(".jpg", bgr, params)[1].tobytes())
    return out


def test_its_pixels_are_nvjpegs_within_two_levels(own, theirs) -> None:
    data = frames(4) + frames(1, width=1280, height=720)
    assert_close(own(data), theirs(data))


def test_a_progressive_frame_is_decoded_alone_and_inside_a_batch(own, theirs) -> None:
    progressive = frames(1, progressive=True)
    assert cv2.imdecode(np.frombuffer(progressive[0], np.uint8), cv2.IMREAD_COLOR) is not None
    for data in (progressive, frames(2) + progressive + frames(1)):
        assert_close(own(data), theirs(data))


def test_a_bad_frame_is_named(own) -> None:
    data = frames(3)
    with pytest.raises(DecodeError, match="frame 1 of the batch"):
        own([data[0], b"not a jpeg", data[2]])
    with pytest.raises(DecodeError, match="frame 2 of the batch"):
        own([data[0], data[1], data[2][:40]])
    assert len(own(data)) == 3  # and the decoder still works


def test_the_call_does_not_wait_for_another_streams_kernel(own, theirs) -> None:
    """100 ms of a spin kernel on another stream; the decode's call returns well before it
    ends (the twenty-ninth session saw every decoder in a process wait for such a kernel on an
    H200; on an H100 none did, docs/benchmarks/h100-2026-12-06/), and its frames are right
    once the decode's stream is waited for."""
    from ttball.bench.timing import cycles_per_ms

    data = frames(4)
    want = theirs(data)
    own(data)  # warm: the batch size set up, the pools filled
    torch.cuda.synchronize()
    cycles = int(100 * cycles_per_ms(torch.device("cuda")))
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        torch.cuda._sleep(cycles)
    start = time.perf_counter()
    images = own(data)
    returned_ms = 1e3 * (time.perf_counter() - start)
    spinning = not other.query()
    torch.cuda.synchronize()
    assert spinning and returned_ms < 50, f"the call took {returned_ms:.1f} ms"
    assert_close(images, want)


def test_it_differs_from_opencv_as_nvjpeg_does(own, theirs) -> None:
    """Both nvJPEG decoders' mean distance from libjpeg, frame by frame, the same to 0.1 level
    (the progressive frame included): what the module's docstring says of OpenCV."""
    data = frames(4) + frames(1, progressive=True)

    def distances(images: list[torch.Tensor]) -> list[float]:
        out = []
        for image, blob in zip(images, data):
            bgr = cv2.imdecode(np.frombuffer(blob, np.uint8), cv2.IMREAD_COLOR)
            rgb = torch.from_numpy(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)).permute(2, 0, 1)
            out.append(round((image.cpu().float() - rgb.float()).abs().mean().item(), 2))
        return out

    mine, want = distances(own(data)), distances(theirs(data))
    print(f"mean |decoded - OpenCV| a frame: nvjpeg-own {mine}, nvjpeg {want}")
    assert all(abs(a - b) <= 0.1 for a, b in zip(mine, want)), (mine, want)

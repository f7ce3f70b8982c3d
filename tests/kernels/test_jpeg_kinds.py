"""Every kind of JPEG a camera or an encoder writes, through each of the device pipeline's
decoders (:class:`ttball.kernels.prepost_image.JpegDecoder`): chroma subsampling 4:2:0, 4:2:2
and 4:4:4, progressive, restart markers, optimised Huffman tables, greyscale, CMYK, a size that
is no whole number of blocks, an EXIF orientation. Each one, between two plain frames of a
batch, comes out as the host path decodes it (``decode_cv2``, OpenCV: the reference the server
and ``ttball track`` use) within the few levels by which nvJPEG's IDCT differs (a frame a
GPU decoder refuses is decoded on the host in its place), or the decoder names it (a 400 for
that frame at the route) and goes on decoding; never other pixels. ``cv2`` runs everywhere;
``nvjpeg`` and ``nvjpeg-own`` need a CUDA GPU."""

from __future__ import annotations

import io
from collections.abc import Callable

import cv2
import numpy as np
import pytest
import torch
from conftest import with_exif_orientation

from ttball.kernels.prepost_image import DecodeError, JpegDecoder, decode_cv2

WIDTH, HEIGHT = 320, 180


def picture(width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    """BGR: smooth colour gradients, a bright band on the left (so a turned frame shows)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    bgr = np.stack([x / width * 200 + 20, y / height * 200 + 20,
                    128 + 60 * np.sin(x / 17) * np.cos(y / 23)], axis=-1)
    bgr[:, : width // 8] = 240
    return bgr.clip(0, 255).astype(np.uint8)


def encode(**params: int) -> Callable[[np.ndarray], bytes]:
    flags = [cv2.IMWRITE_JPEG_QUALITY, 92]
    for name, value in params.items():
        flags += [getattr(cv2, f"IMWRITE_JPEG_{name.upper()}"), value]
    return lambda bgr: cv2.imencode(".jpg", bgr, flags)[1].tobytes()


def grey(bgr: np.ndarray) -> bytes:
    return cv2.imencode(".jpg", cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY))[1].tobytes()


def cmyk(bgr: np.ndarray) -> bytes:
    image = pytest.importorskip("PIL.Image")
    out = io.BytesIO()
    image.fromarray(bgr[..., ::-1].copy()).convert("CMYK").save(out, "JPEG", quality=92)
    return out.getvalue()


KINDS: dict[str, Callable[[np.ndarray], bytes]] = {
    "baseline 4:2:0": encode(),
    "4:2:2": encode(sampling_factor=cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422),
    "4:4:4": encode(sampling_factor=cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444),
    "progressive": encode(progressive=1),
    "restart markers": encode(rst_interval=3),
    "optimised Huffman": encode(optimize=1),
    "greyscale": grey,
    "CMYK": cmyk,
    "EXIF orientation 6": lambda bgr: with_exif_orientation(encode()(bgr), 6),
}

DECODERS = [pytest.param(("cv2", "cpu"), id="cv2")] + [
    pytest.param((library, "cuda"), id=library,
                 marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                            reason="needs a CUDA GPU")])
    for library in ("nvjpeg", "nvjpeg-own")]


@pytest.fixture(scope="module", params=DECODERS)
def decoder(request: pytest.FixtureRequest) -> JpegDecoder:
    library, device = request.param
    decoder = JpegDecoder(device, library=library)
    if decoder.kind != library:
        pytest.fail(f"{library} fell back to {decoder.kind}: {decoder.gpu_reason}")
    return decoder


def mean_difference(got: torch.Tensor, want: torch.Tensor) -> float:
    return (got.cpu().int() - want.int()).abs().float().mean().item()


@pytest.mark.parametrize("size", [(WIDTH, HEIGHT), (WIDTH + 1, HEIGHT + 3)],
                         ids=["whole blocks", "odd size"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_decodes_as_the_host_path_or_is_named(decoder, kind, size) -> None:
    plain = encode()(picture())
    data = KINDS[kind](picture(*size))
    want = [decode_cv2(blob) for blob in (plain, data, plain)]
    assert want[1].shape == (3, size[1], size[0])  # as stored, never turned
    # the decoders differ from OpenCV's IDCT by a few levels (1-2 on these smooth pictures
    # with nvJPEG); a turned, shifted or colour-swapped frame differs by tens
    tolerance = 0.5 if decoder.kind == "cv2" else 4.0
    try:
        got = decoder([plain, data, plain])
    except DecodeError as exc:
        assert decoder.kind != "cv2", f"the host path refused {kind}: {exc}"
        assert exc.index == 1, exc  # the odd frame named, not a plain one
        again = decoder([plain, plain])
        assert max(mean_difference(g, want[0]) for g in again) <= tolerance
        return
    assert len(got) == 3
    for frame, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == torch.uint8, (kind, frame, g.shape)
        assert g.device.type == decoder.device.type
        assert mean_difference(g, w) <= tolerance, (kind, frame, mean_difference(g, w))
    if kind == "greyscale":
        assert torch.equal(got[1][0], got[1][1]) and torch.equal(got[1][1], got[1][2])

"""Request bodies → encoded frames (:class:`Part`) → RGB arrays, with the worker's limits.

Frame bodies (``POST /v1/sessions/{id}/frames``):

- ``image/jpeg`` or ``image/png``: one frame.
- ``application/octet-stream`` with ``?width=&height=``: raw RGB ``uint8`` rows, ``k·W·H·3``
  bytes for ``k`` frames.
- ``application/x-ttball-frames``: records of ``[u32 big-endian length][JPEG/PNG bytes]``.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from ttball.frames import IMREAD_FLAGS
from ttball.serve.settings import ApiError, ServeSettings

IMAGE_TYPES = ("image/jpeg", "image/png")
RAW_TYPE = "application/octet-stream"
RECORDS_TYPE = "application/x-ttball-frames"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


async def read_body(request: Any, limit: int) -> bytes:
    """The whole body, or 413 as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body_too_large", f"body of {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"body over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(body: bytes | str, what: str, code: str = "bad_json") -> Any:
    """``body`` as JSON, or 400 ``code`` saying why. Strict where Python's parser is lenient:
    ``NaN``, ``Infinity`` and numbers beyond a float's range are refused (no JSON reply could
    carry them back), nesting too deep to parse, and a key given twice in one object (Python
    keeps the last, another client's parser the first: two readings of one request)."""
    try:
        return json.loads(body, parse_constant=_no_constant, parse_float=_finite,
                          object_pairs_hook=_no_repeated_key)
    except RecursionError:
        raise ApiError(400, code, f"{what} is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, ours
        raise ApiError(400, code, f"{what} is not JSON: {exc}") from None


def _no_repeated_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"key {key!r} appears twice in one object")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is out of range")
    return value


@dataclass(frozen=True)
class Part:
    """One frame as received: encoded image bytes, or raw RGB with its size."""

    data: bytes
    raw_size: tuple[int, int] | None = None  # (width, height) for raw RGB


def split_body(
    content_type: str, body: bytes, settings: ServeSettings,
    width: int | None = None, height: int | None = None,
) -> list[Part]:
    """The frames in one request body; 4xx :class:`ApiError` for anything malformed."""
    kind = content_type.split(";")[0].strip().lower()
    if not body:
        raise ApiError(400, "empty_frame", "the request body is empty")
    if kind in IMAGE_TYPES:
        return [_checked(Part(body), settings)]
    if kind == RAW_TYPE:
        return _raw_parts(body, width, height, settings)
    if kind == RECORDS_TYPE:
        return [_checked(p, settings) for p in _records(body)]
    raise ApiError(415, "unsupported_media_type",
                   f"Content-Type {kind or '(none)'} not supported; use "
                   f"{', '.join(IMAGE_TYPES)}, {RAW_TYPE} (with ?width=&height=) or {RECORDS_TYPE}")


def _checked(part: Part, settings: ServeSettings) -> Part:
    if not part.data:
        raise ApiError(400, "empty_frame", "a frame is empty (0 bytes)")
    if len(part.data) > settings.max_frame_bytes:
        raise ApiError(413, "frame_too_large",
                       f"a frame is {len(part.data)} bytes; the limit is {settings.max_frame_bytes}")
    return part


def _records(body: bytes) -> list[Part]:
    parts, offset = [], 0
    while offset < len(body):
        if offset + 4 > len(body):
            raise ApiError(400, "bad_body", f"truncated record header at byte {offset}")
        (length,) = struct.unpack_from(">I", body, offset)
        offset += 4
        if offset + length > len(body):
            raise ApiError(400, "bad_body",
                           f"record at byte {offset - 4} claims {length} bytes; {len(body) - offset} left")
        parts.append(Part(body[offset:offset + length]))
        offset += length
    return parts


def _raw_parts(body: bytes, width: int | None, height: int | None,
               settings: ServeSettings) -> list[Part]:
    if not width or not height or width < 1 or height < 1:
        raise ApiError(400, "wrong_shape", f"{RAW_TYPE} needs ?width=&height= (positive integers)")
    if width * height > settings.max_frame_pixels:
        raise ApiError(413, "frame_too_large",
                       f"{width}x{height} exceeds {settings.max_frame_pixels} pixels")
    size = width * height * 3
    if len(body) % size:
        raise ApiError(400, "wrong_shape",
                       f"{len(body)} bytes is not a whole number of {width}x{height} RGB frames "
                       f"({size} bytes each)")
    return [_checked(Part(body[i:i + size], (width, height)), settings)
            for i in range(0, len(body), size)]


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG or JPEG header without decoding; None if not found."""
    if data.startswith(PNG_MAGIC):  # its first chunk is IHDR: width, height < 2^31
        if len(data) < 24 or data[12:16] != b"IHDR":
            return None
        width, height = struct.unpack(">II", data[16:24])
        return (width, height) if max(width, height) < 1 << 31 else None
    if not data.startswith(b"\xff\xd8"):
        return None
    for i, marker in _jpeg_markers(data):
        if i + 9 >= len(data):
            return None
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
    return None


def _jpeg_markers(data: bytes) -> Iterator[tuple[int, int]]:
    """``(position, marker)`` of a JPEG's markers, its segments walked from after its
    start-of-image (a segment's content, such as an embedded thumbnail, skipped), until a
    byte that is no marker or the end of ``data``."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return
        marker = data[i + 1]
        yield i, marker
        if marker in (0xD8, 0x01, 0xFF) or 0xD0 <= marker <= 0xD7:
            i += 1 if marker == 0xFF else 2
            continue
        (length,) = struct.unpack(">H", data[i + 2:i + 4])
        i += 2 + length


def jpeg_truncated(data: bytes) -> bool:
    """Whether a JPEG's bytes stop before its end-of-image marker (``FF D9``) after its first
    scan. Inside a scan's entropy-coded data an ``FF`` byte is always followed by ``00`` or a
    restart marker, so an ``FF D9`` past the scan's start is the real end. OpenCV's decoder
    refuses a JPEG without it; the GPU decoders need not notice (``nvjpeg-own`` queues the
    decode without waiting for it), so :func:`header_size` checks it for both paths before a
    frame is queued."""
    scan = next((i for i, marker in _jpeg_markers(data) if marker == 0xDA), None)
    return scan is None or data.rfind(b"\xff\xd9") < scan


def header_size(part: Part, settings: ServeSettings) -> tuple[int, int]:
    """(width, height) of an encoded frame from its header; 400 for a body that is no image or
    a JPEG cut short, 413 for a huge one."""
    size = image_size(part.data)
    if size is None:
        raise ApiError(400, "not_an_image", "the frame is not a JPEG or PNG image")
    if not part.data.startswith(PNG_MAGIC) and jpeg_truncated(part.data):
        raise ApiError(400, "not_an_image",
                       "the JPEG ends before its end-of-image marker (truncated?)")
    if size[0] * size[1] > settings.max_frame_pixels:
        raise ApiError(413, "frame_too_large",
                       f"{size[0]}x{size[1]} exceeds {settings.max_frame_pixels} pixels")
    return size


def decode(part: Part, settings: ServeSettings) -> np.ndarray:
    """RGB ``uint8 (H, W, 3)`` as stored (an EXIF orientation not applied, as the GPU decoders
    don't); 400 for a body that is no image, 413 for a huge one."""
    if part.raw_size is not None:
        w, h = part.raw_size
        return np.frombuffer(part.data, np.uint8).reshape(h, w, 3)
    header_size(part, settings)
    bgr = cv2.imdecode(np.frombuffer(part.data, np.uint8), IMREAD_FLAGS)
    if bgr is None or bgr.ndim != 3 or bgr.size == 0:
        raise ApiError(400, "not_an_image", "the frame could not be decoded (corrupt image?)")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)

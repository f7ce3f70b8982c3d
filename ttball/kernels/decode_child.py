"""The child side of :class:`~ttball.kernels.decode_process.DecoderProcess`: :func:`serve`
runs in each child process, decoding the parent's requests into its shared slots, and
:func:`slot_runs` lays a round's frames in a slot, for the child's copies in and the parent's
copies out alike."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from itertools import groupby
from typing import Any

import torch
from torch import Tensor

from ttball.kernels.prepost_image import DecodeError, JpegDecoder
from ttball.threadnames import name_os_thread


def serve(conn: Any, device_name: str, library: str, ring: list[Tensor],
          inboxes: list[Tensor]) -> None:
    """The child: decode each request into its slot of ``ring`` until ``None`` or EOF.

    A request is ``(slot, "inbox", lengths)`` (the JPEG bytes one after another in the slot's
    inbox) or ``(slot, "pipe", blobs)``; the next may come before this one is answered (it
    waits its turn, also while a round waits for its ``"next"``).

    Replies: ``("ready", kind, gpu_reason, (entered, decoder_s))`` (when this function began on
    the host's monotonic clock, and the decoder's set-up in seconds) or ``("error", why)``
    once; then per request ``("part", shapes, seconds)`` (the slot is full: send ``"next"``
    once it is copied out) …
    and ``("done", shapes, seconds)``, or ``("decode", index, reason)`` / ``("error", why)``;
    ``seconds``: the round's ``{"child": decoding, "fill": copying into the slot, "got": when
    the request (or its ``"next"``) was in hand, "answered": when this answer left}``, the
    last two on the host's monotonic clock."""
    entered = time.monotonic()  # (the arguments, CUDA buffers among them, are in hand)
    name_os_thread("tt-decoder")  # its CPU time told apart (scripts/proc_cpu.py)
    try:
        device = torch.device(device_name)
        decoder = JpegDecoder(device, library=library)
        cuda = device.type == "cuda"
        stream = torch.cuda.Stream(device) if cuda else None
    except Exception as exc:  # noqa: BLE001  (the parent raises it)
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", decoder.kind, decoder.gpu_reason,
               (entered, time.monotonic() - entered)))
    held = [inbox.numpy() for inbox in inboxes]
    pipe = _Pipe(conn)
    while True:
        try:
            request = pipe.request()
        except (EOFError, OSError):
            return
        got = time.monotonic()
        if request is None:
            return
        slot, where, payload = request
        if where == "inbox":
            blobs, offset = [], 0
            for n in payload:  # copied out: the parent may write the inbox once we answer
                blobs.append(held[slot][offset:offset + n].tobytes())
                offset += n
        else:
            blobs = payload
        try:
            with torch.cuda.stream(stream) if cuda else nullcontext():
                start = time.perf_counter()
                images = decoder(blobs)
                _fill(pipe, images, ring[slot], stream, time.perf_counter() - start, got)
        except DecodeError as exc:
            conn.send(("decode", exc.index, exc.reason))
        except Exception as exc:  # noqa: BLE001
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class _Pipe:
    """The child's end: requests in the order sent, and a round's ``"next"`` told apart from
    a request sent meanwhile (which is kept for its turn)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._waiting: deque[Any] = deque()

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def request(self) -> Any:
        return self._waiting.popleft() if self._waiting else self.conn.recv()

    def next_round(self) -> bool:
        """Wait for the parent's ``"next"``; False if it ended the request instead."""
        while True:
            message = self.conn.recv()
            if message == "next":
                return True
            if message is None:
                self._waiting.append(None)
                return False
            self._waiting.append(message)


def _fill(conn: _Pipe, images: list[Tensor], buf: Tensor, stream: Any, decoding: float,
          got: float) -> None:
    """Copy ``images`` into ``buf`` one after another, a round at a time (``decoding``: the
    seconds the decode took, reported with the first round; ``got``: when the request came)."""
    held: list[Tensor] = []
    offset = 0
    start = time.perf_counter()
    for image in images:
        n = image.numel()
        if n > buf.numel():
            raise ValueError(f"a frame of {n} bytes is larger than the decode slot "
                             f"({buf.numel()} bytes)")
        if offset + n > buf.numel():
            _round(conn, "part", _copy_in(held, buf), stream, decoding, start, got)
            if not conn.next_round():
                raise RuntimeError("the parent ended the request")
            got = time.monotonic()
            held, offset, decoding, start = [], 0, 0.0, time.perf_counter()
        held.append(image)
        offset += n
    _round(conn, "done", _copy_in(held, buf), stream, decoding, start, got)


def _copy_in(images: list[Tensor], buf: Tensor) -> list[tuple[int, ...]]:
    """``images`` into ``buf`` one after another, each run of one shape as one copy (one
    kernel, not one a frame: each must find room among the other processes' kernels on a busy
    GPU); their shapes."""
    shapes = [tuple(image.shape) for image in images]
    for first, k, run in slot_runs(buf, shapes):
        torch.stack(images[first:first + k], out=run)
    return shapes


def slot_runs(buf: Tensor, shapes: Sequence[tuple[int, ...]]) -> Iterator[tuple[int, int, Tensor]]:
    """Frames of ``shapes`` laid one after another from the start of ``buf``, by runs of one
    shape: each run's first frame's index, its frames and ``buf``'s view of them,
    ``(frames, *shape)`` (the child's copies in and the parent's copies out both go by it)."""
    offset = first = 0
    for shape, run in groupby(shapes):
        k = sum(1 for _ in run)
        n = k * math.prod(shape)
        yield first, k, buf[offset:offset + n].view(k, *shape)
        offset, first = offset + n, first + k


def _round(conn: _Pipe, kind: str, shapes: list[tuple[int, ...]], stream: Any, decoding: float,
           start: float, got: float) -> None:
    if stream is not None:
        stream.synchronize()
    conn.send((kind, shapes, {"child": decoding, "fill": time.perf_counter() - start,
                              "got": got, "answered": time.monotonic()}))


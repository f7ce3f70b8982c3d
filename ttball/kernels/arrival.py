"""Decode on arrival: a lane's JPEG frames decoded on a thread of their own as they arrive.

In the worker's device pipeline a push decodes its frames itself: the lane's thread takes a
batch of uploads, decodes them, resizes them, runs the network. Under a latency load (serve's
six replicas of two lanes at 64 sessions) the decode is about half of a push (2.4 of 4.6 ms,
fifty-sixth session), and the lanes' queue model said a push without it would take the client's
p99 from ~50 to ~42 ms (``scripts/lane_queue_model.py``, ``docs/benchmarks/LOG.md``).

:class:`ArrivalDecoder` decodes an upload's frames the moment the event loop queues it
(:meth:`ArrivalDecoder.submit`), on its own thread and CUDA stream, so by the time its lane
takes the upload (the wait for company, the push before it) its frames are decoded or on their
way. Its thread takes every request queued since its last call as one batch. Its decoder is
``nvjpeg-own`` where that can run (queued on the stream without waiting for the lanes' work;
torchvision's nvJPEG, the fallback, waits for all of the process's GPU work in its call), else
the next one :class:`~ttball.kernels.prepost_image.JpegDecoder` falls back to (``kind``,
``gpu_reason``).

Measured (fifty-seventh session, ``docs/benchmarks/h100-2026-12-06f/``): under that load every
frame came decoded and the push's decode stage fell 1.5 ms, but the duplicate check's read-back
waited 2.4 ms longer for the decode on the JPEG engines (a push's frames arrive during its wait
for company, and a batch's decode takes as long), so the client's p99 rose by 21 ms; on a
quieter H100 (fifty-eighth session, ``h100-2026-12-06g/``) by 5.3 ms, a batch taking ~3 ms for
~2 frames (as long as the pushes' own decode) and the lanes' GPU stages slowing beside it:
opt-in, experimental. One batch is in flight at a time (the thread waits for a batch's event before it
takes the next): a first build that started its next batch at once hung two replicas of six.

A request's :class:`Decoded` frames are ready for a stream once it has waited for their event
(:meth:`Decoded.use_on`; on the CPU there is none). A request whose frames do not all decode
resolves to None, as does any request after :meth:`ArrivalDecoder.close`: the push decodes
those frames itself, and refuses a bad one as it always has.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor

from ttball.kernels.prepost_image import JpegDecoder
from ttball.threadnames import name_os_thread

# the decoder asked for: its call queues the decode on the thread's stream and returns
LIBRARY = "nvjpeg-own"


@dataclass(frozen=True)
class Decoded:
    """One request's frames, in order, and the event recorded on the arrival stream after their
    decode (None on the CPU)."""

    images: tuple[Tensor, ...]
    event: torch.cuda.Event | None

    def use_on(self, stream: torch.cuda.Stream | None) -> tuple[Tensor, ...]:
        """The frames, once ``stream`` (a CUDA stream of their device) waits for their decode;
        their memory is kept from the allocator until that stream's work on them is done."""
        if self.event is not None and stream is not None:
            stream.wait_event(self.event)
            for image in self.images:
                image.record_stream(stream)
        return self.images


class ArrivalDecoder:
    """JPEG requests → :class:`Decoded` futures, decoded on a thread of its own (``name``) and,
    on CUDA, on a stream of its own of high priority. ``library``: the
    :class:`~ttball.kernels.prepost_image.JpegDecoder` asked for (it falls back where it can't
    run: ``kind`` says which decodes, ``gpu_reason`` why). Counts: ``batches`` (decoder calls),
    ``frames`` decoded, ``failed`` (requests resolved to None because a frame did not decode);
    ``on_batch(frames, seconds)`` is called after each batch decoded (its thread), with its time
    from the call to its decode's end on the GPU (the call's on the CPU)."""

    def __init__(self, device: torch.device | str, library: str = LIBRARY,
                 name: str = "decode-arrival",
                 on_batch: Callable[[int, float], None] | None = None) -> None:
        self.device = torch.device(device)
        self.stream = (torch.cuda.Stream(self.device, priority=-1)
                       if self.device.type == "cuda" else None)
        self.batches = self.frames = self.failed = 0
        self.on_batch = on_batch
        self._started = 0.0  # the batch in hand's call began (perf_counter)
        self._queue: queue.SimpleQueue[tuple[tuple[bytes, ...], Future[Decoded | None]] | None]
        self._queue = queue.SimpleQueue()
        self._closed = False
        # the decoder is made on the thread that uses it (an nvJPEG handle never meets another)
        made: Future[JpegDecoder] = Future()
        self._thread = threading.Thread(target=self._loop, args=(library, made), name=name,
                                        daemon=True)
        self._thread.start()
        self.decoder = made.result()

    @property
    def kind(self) -> str:
        return self.decoder.kind

    @property
    def gpu_reason(self) -> str | None:
        return self.decoder.gpu_reason

    def submit(self, blobs: Sequence[bytes]) -> Future[Decoded | None]:
        """Start decoding ``blobs`` (any thread); the future resolves to their frames, or to
        None when they are left to the caller (a frame that does not decode; closed)."""
        future: Future[Decoded | None] = Future()
        if self._closed or not blobs:
            future.set_result(None)
        else:
            self._queue.put((tuple(blobs), future))
        return future

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop the thread once the requests queued are decoded; later ones resolve to None."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join(timeout)
        # a request that raced the close past the thread's end: left to its push
        while not self._thread.is_alive():
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                return
            if request is not None:
                request[1].set_result(None)

    def _loop(self, library: str, made: Future[JpegDecoder]) -> None:
        name_os_thread("tt-arrival")  # its CPU apart from the lanes' (scripts/proc_cpu.py)
        try:
            made.set_result(JpegDecoder(self.device, library=library))
        except BaseException as exc:  # noqa: BLE001  (to the constructor, which raises it)
            made.set_exception(exc)
            return
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = [first], False
            while True:  # everything queued meanwhile, as one call
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            try:
                self._decode(batch)
            except Exception:  # noqa: BLE001  (an event not recorded): their pushes decode them
                for _, future in batch:
                    if not future.done():
                        future.set_result(None)
            if stop:
                return

    def _on_stream(self) -> AbstractContextManager[object]:
        return torch.cuda.stream(self.stream) if self.stream is not None else nullcontext()

    def _decode(self, batch: list[tuple[tuple[bytes, ...], Future[Decoded | None]]]) -> None:
        """``batch`` in one decoder call; when a frame fails it, each request alone (the bad
        one resolves to None, the others still decoded)."""
        try:
            images = self._call([blob for blobs, _ in batch for blob in blobs])
        except Exception:  # noqa: BLE001  (a bad frame, or any failure: the push says what)
            if len(batch) > 1:
                for request in batch:
                    self._decode([request])
                return
            self.failed += 1
            batch[0][1].set_result(None)
            return
        event = self._record()
        start = 0
        for blobs, future in batch:
            future.set_result(Decoded(tuple(images[start : start + len(blobs)]), event))
            start += len(blobs)
        # one batch in flight at a time: the thread sleeps (a blocking event) until this one is
        # decoded on the GPU before it takes the next (nvJPEG reuses its decode state's buffers
        # from one batch to the next, and the lanes' own calls always had theirs read back
        # first; a first build that did not wait hung two replicas of six under load)
        if event is not None:
            event.synchronize()
        if self.on_batch is not None:
            self.on_batch(start, time.perf_counter() - self._started)

    def _record(self) -> torch.cuda.Event | None:
        """An event on the arrival stream after the batch just queued (None on the CPU)."""
        if self.stream is None:
            return None
        event = torch.cuda.Event(blocking=True)
        event.record(self.stream)
        return event

    def _call(self, blobs: list[bytes]) -> list[Tensor]:
        self._started = time.perf_counter()
        with self._on_stream():
            images = self.decoder(blobs)
        self.batches += 1
        self.frames += len(blobs)
        return images

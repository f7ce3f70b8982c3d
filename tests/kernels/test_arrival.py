"""The arrival decoder (``serve --decode-on-arrival``, ``ttball.kernels.arrival``): requests
decoded on its thread, those queued meanwhile in one call, a bad one left to its push (None)
without costing the others theirs, nothing lost at close. Its frames in a push:
``test_prepost.py``; in the worker: ``tests/serve/test_device_pipeline.py``."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import cv2
import numpy as np
import pytest
import torch

from ttball.kernels.arrival import ArrivalDecoder, Decoded
from ttball.kernels.prepost import DecodeError, decode_cv2


def jpeg(value: int, size: tuple[int, int] = (64, 36)) -> bytes:
    rgb = np.full((size[1], size[0], 3), value, np.uint8)
    rgb[:, : size[0] // 2, 0] = 255 - value  # not flat: a channel mix-up would show
    return cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))[1].tobytes()


class GatedDecoder:
    """Decodes as cv2 does; its first call waits for ``go``; ``calls`` holds each call's size;
    a blob ``b"bad"`` fails the call it is in."""

    kind, gpu_reason = "gated", None

    def __init__(self) -> None:
        self.go, self.entered = threading.Event(), threading.Event()
        self.calls: list[int] = []

    def __call__(self, blobs):  # type: ignore[no-untyped-def]
        self.entered.set()
        self.go.wait(10)
        self.calls.append(len(blobs))
        for i, blob in enumerate(blobs):
            if blob == b"bad":
                raise DecodeError(i, "not a decodable JPEG")
        return [decode_cv2(blob, i) for i, blob in enumerate(blobs)]


def test_requests_decode_on_the_thread_as_cv2_does() -> None:
    arrival = ArrivalDecoder("cpu", name="decode-arrival-test")
    try:
        assert arrival.kind == "cv2" and arrival.stream is None
        assert "decode-arrival-test" in {t.name for t in threading.enumerate()}
        blobs = [jpeg(v) for v in (10, 120, 240)]
        got = arrival.submit(blobs).result(timeout=10)
        assert isinstance(got, Decoded) and got.event is None
        images = got.use_on(None)
        assert len(images) == 3
        for image, blob in zip(images, blobs):
            assert torch.equal(image, decode_cv2(blob))
        assert arrival.submit([]).result(timeout=1) is None  # nothing to decode
        assert (arrival.batches, arrival.frames, arrival.failed) == (1, 3, 0)
    finally:
        arrival.close()


def test_requests_queued_meanwhile_go_in_one_call_and_a_bad_one_alone_fails() -> None:
    arrival = ArrivalDecoder("cpu")
    gated = GatedDecoder()
    arrival.decoder = gated  # type: ignore[assignment]
    try:
        first = arrival.submit([jpeg(1)])
        assert gated.entered.wait(10)  # the thread is in its first call
        good = [arrival.submit([jpeg(v), jpeg(v + 1)]) for v in (20, 40)]
        bad = arrival.submit([jpeg(60), b"bad"])
        gated.go.set()
        assert first.result(timeout=10) is not None
        assert bad.result(timeout=10) is None  # left to its push, which refuses the frame
        for future, v in zip(good, (20, 40)):
            images = future.result(timeout=10).images  # type: ignore[union-attr]
            assert [int(i[1, 0, -1]) for i in images] == [
                int(decode_cv2(jpeg(w))[1, 0, -1]) for w in (v, v + 1)]
        # the first alone; the three queued meanwhile as one call of 6 frames, failed by the
        # bad frame; then each request alone
        assert gated.calls == [1, 6, 2, 2, 2]
        assert (arrival.batches, arrival.frames, arrival.failed) == (3, 5, 1)
    finally:
        arrival.close()


def test_close_decodes_what_was_queued_and_leaves_later_requests_to_their_pushes() -> None:
    arrival = ArrivalDecoder("cpu")
    gated = GatedDecoder()
    arrival.decoder = gated  # type: ignore[assignment]
    first = arrival.submit([jpeg(1)])
    assert gated.entered.wait(10)
    queued = arrival.submit([jpeg(2)])
    gated.go.set()
    arrival.close()
    assert first.result(timeout=1) is not None and queued.result(timeout=1) is not None
    assert arrival.submit([jpeg(3)]).result(timeout=1) is None
    assert not arrival._thread.is_alive()
    # a request that slipped in as the thread ended (a submit racing the close) is resolved
    raced: Future[Decoded | None] = Future()
    arrival._queue.put(((jpeg(4),), raced))
    arrival.close()  # twice: nothing more
    assert raced.result(timeout=1) is None


def test_a_decoder_that_breaks_leaves_the_frames_to_their_pushes() -> None:
    """Any failure of the call (not only a frame that does not decode) resolves its requests
    to None; the thread goes on."""
    arrival = ArrivalDecoder("cpu")

    def broken(blobs):  # type: ignore[no-untyped-def]
        raise RuntimeError("device lost")

    decoder, arrival.decoder = arrival.decoder, broken  # type: ignore[assignment]
    try:
        assert arrival.submit([jpeg(1)]).result(timeout=10) is None
        arrival.decoder = decoder
        assert arrival.submit([jpeg(1)]).result(timeout=10) is not None
    finally:
        arrival.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_frames_come_behind_an_event_of_the_arrival_stream() -> None:
    """On the GPU: the frames are decoded on the arrival stream (nvjpeg-own where it builds,
    else its fallback, which ``gpu_reason`` names) and ready for another stream once it waits
    for their event: the pixels of the host decode within JPEG decoders' rounding."""
    arrival = ArrivalDecoder("cuda")
    try:
        assert arrival.stream is not None and arrival.kind in ("nvjpeg-own", "nvjpeg"), (
            arrival.kind, arrival.gpu_reason)
        blobs = [jpeg(v, (320, 180)) for v in (30, 200)]
        got = arrival.submit(blobs).result(timeout=60)
        assert got is not None and got.event is not None
        other = torch.cuda.Stream()
        with torch.cuda.stream(other):
            images = got.use_on(other)
            means = [float(image.float().mean()) for image in images]
        for mean, blob in zip(means, blobs):
            assert abs(mean - float(decode_cv2(blob).float().mean())) < 2
    finally:
        arrival.close()


def test_a_decoder_that_cannot_be_made_fails_the_constructor() -> None:
    """The decoder is made on the arrival thread (where it is used); its error reaches the
    caller, and the thread ends."""
    before = threading.active_count()
    with pytest.raises(ValueError, match="unknown JPEG decoder 'bogus'"):
        ArrivalDecoder("cpu", library="bogus")
    assert threading.active_count() == before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_requests_back_to_back_all_decode_right() -> None:
    """On the GPU, requests queued faster than they decode (as under load: the thread's next
    call comes while the last batch may still be on the GPU) each decode to their own pixels,
    within seconds (one batch in flight at a time)."""
    arrival = ArrivalDecoder("cuda")
    try:
        values = [(17 * k) % 250 for k in range(60)]
        blobs = [jpeg(v, (1280, 720)) for v in values]  # encoded first: queued back to back
        futures = [arrival.submit([blob]) for blob in blobs]
        got = [future.result(timeout=60) for future in futures]
        torch.cuda.synchronize()
        for decoded, blob, v in zip(got, blobs, values):
            assert decoded is not None
            (image,) = decoded.images
            want = float(decode_cv2(blob).float().mean())
            assert abs(float(image.float().mean()) - want) < 2, (v, want)
        assert arrival.batches < len(values)  # the queue was taken in batches
    finally:
        arrival.close()


def test_a_batch_is_decoded_on_the_gpu_before_the_next_is_taken() -> None:
    """One batch in flight: after each decoder call the thread waits for that batch's event
    (on CUDA, recorded after its decode; a stand-in here, where there is none), then reports
    the batch (frames, seconds), and only then takes the next."""
    order: list[str] = []
    arrival = ArrivalDecoder("cpu", on_batch=lambda n, s: order.append(f"batch of {n}"))

    class Event:
        def synchronize(self) -> None:
            order.append("waited")

    def decoder(blobs):  # type: ignore[no-untyped-def]
        order.append("decoded")
        return [decode_cv2(blob) for blob in blobs]

    arrival.decoder, arrival._record = decoder, Event  # type: ignore[assignment, method-assign]
    try:
        first = arrival.submit([jpeg(5), jpeg(6)])
        assert first.result(timeout=10) is not None
        assert arrival.submit([jpeg(7)]).result(timeout=10) is not None
        arrival.close()
        assert order == ["decoded", "waited", "batch of 2", "decoded", "waited", "batch of 1"]
    finally:
        arrival.close()

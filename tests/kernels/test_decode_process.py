"""ttball.kernels.decode_process: the JPEG decoder in a child process, run here with cv2 on
the CPU (the ring is shared memory instead of CUDA IPC; the protocol is the same)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from ttball.kernels.decode_process import DecoderProcess
from ttball.kernels.prepost_image import DecodeError, JpegDecoder

FRAME = 36 * 64 * 3  # bytes of one decoded test frame


def blobs(count: int, height: int = 36) -> list[bytes]:
    rng = np.random.default_rng(count)
    return [cv2.imencode(".jpg", rng.integers(0, 255, (height, 64, 3), dtype=np.uint8))[1]
            .tobytes() for _ in range(count)]


@pytest.fixture(scope="module")
def decoder():
    """Slots of two and a half frames: a batch of five comes back in rounds."""
    d = DecoderProcess("cpu", library="cv2", slot_bytes=FRAME * 5 // 2)
    yield d
    d.close()


def assert_frames_equal(got: list[torch.Tensor], data: list[bytes]) -> None:
    want = JpegDecoder("cpu", library="cv2")(data)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.is_contiguous() and torch.equal(g, w)


def test_frames_equal_the_in_process_decoder_in_rounds_and_slots(decoder):
    assert (decoder.kind, decoder.gpu_reason) == ("cv2", "cv2 decode requested")
    for count in (1, 2, 5, 3):  # 5: three rounds of one slot; calls alternate the two slots
        data = blobs(count)
        assert_frames_equal(decoder(data), data)
    assert decoder([]) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc")
def test_a_child_names_itself_for_per_process_cpu(decoder):
    """scripts/proc_cpu.py tells the decode children apart by this name."""
    pid = decoder._children[0].proc.pid
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "tt-decoder"


def test_the_last_calls_time_is_split_into_child_fill_and_transfer(decoder):
    start = time.perf_counter()
    decoder(blobs(5))  # three rounds
    elapsed = time.perf_counter() - start
    parts = decoder.last_seconds
    assert set(parts) == {"child", "fill", "transfer", "to_child", "from_child", "copy_out"}
    assert all(seconds > 0 for seconds in parts.values())
    assert parts["child"] + parts["fill"] + parts["transfer"] <= elapsed
    # the transfer's parts, each on one side of the pipe, add up to no more than it
    assert parts["to_child"] + parts["from_child"] + parts["copy_out"] <= parts["transfer"]


def test_returned_frames_are_the_callers_not_views_of_the_slot(decoder):
    first = blobs(2)
    kept = decoder(first)
    for _ in range(3):  # both slots written over
        decoder(blobs(2, height=36))
    assert_frames_equal(kept, first)


def test_frames_of_several_shapes_in_one_call_come_back_in_order(decoder):
    data = blobs(2) + blobs(1, height=40) + blobs(2)[:1] + blobs(1, height=24)
    got = decoder(data)
    assert_frames_equal(got, data)
    assert [tuple(g.shape) for g in got] == [(3, 36, 64), (3, 36, 64), (3, 40, 64), (3, 36, 64),
                                            (3, 24, 64)]


def test_a_run_of_one_shape_is_copied_out_once(decoder):
    """Frames of one shape in one round share one copy (one torch call, not one a frame)."""
    got = decoder(blobs(2))
    assert got[0].untyped_storage().data_ptr() == got[1].untyped_storage().data_ptr()


def test_a_bad_frame_names_its_index_and_the_process_goes_on(decoder):
    data = blobs(3)
    with pytest.raises(DecodeError, match="frame 2 of the batch: not a decodable image") as info:
        decoder([data[0], data[1], b"not a jpeg"])
    assert info.value.index == 2
    assert_frames_equal(decoder(data), data)


def test_a_frame_larger_than_a_slot_is_an_error_and_the_process_goes_on(decoder):
    with pytest.raises(RuntimeError, match="larger than the decode slot"):
        decoder(blobs(1, height=36 * 3))
    data = blobs(2)
    assert_frames_equal(decoder(data), data)


def test_a_request_larger_than_the_inbox_goes_through_the_pipe():
    """The bytes go through the shared inbox when they fit, through the pipe when they do
    not; the frames are the same, and a call after a piped one uses the inbox again."""
    data = blobs(4)
    d = DecoderProcess("cpu", library="cv2", slot_bytes=FRAME * 4,
                       inbox_bytes=sum(map(len, data[:3])))
    try:
        child = d._children[0]
        assert_frames_equal(d(data[:3]), data[:3])
        assert child.piped == 0
        assert_frames_equal(d(data), data)
        assert child.piped == 1
        assert_frames_equal(d(data[:2]), data[:2])
        assert child.piped == 1
    finally:
        d.close()
    with pytest.raises(ValueError, match="inbox_bytes >= 0"):
        DecoderProcess("cpu", inbox_bytes=-1)


def test_a_child_that_died_is_started_again_by_the_next_call():
    d = DecoderProcess("cpu", library="cv2", slot_bytes=FRAME * 2)
    try:
        d._children[0].proc.kill()
        d._children[0].proc.join()
        data = blobs(2)
        assert_frames_equal(d(data), data)
        assert d.restarts == 1
    finally:
        d.close()
    assert not d._children[0].proc.is_alive()


def test_a_child_that_cannot_start_its_decoder_is_an_error_at_once():
    with pytest.raises(RuntimeError, match="the decode process could not start: ValueError: "
                                           "unknown JPEG decoder 'gif'"):
        DecoderProcess("cpu", library="gif")


def test_children_start_together_then_are_waited_for(monkeypatch):
    """Each child's start (spawn, imports, its decoder) runs beside the others' instead of
    after them: all launched before the first is waited for."""
    from ttball.kernels import decode_process

    events: list[str] = []
    launch, wait = decode_process._Child._launch, decode_process._Child.wait_ready

    def launched(child):
        events.append("launch")
        launch(child)

    def waited(child):
        events.append("wait")
        wait(child)

    monkeypatch.setattr(decode_process._Child, "_launch", launched)
    monkeypatch.setattr(decode_process._Child, "wait_ready", waited)
    d = DecoderProcess("cpu", library="cv2", processes=3)
    try:
        assert events == ["launch"] * 3 + ["wait"] * 3
        assert d.kind == "cv2"
        assert_frames_equal(d(blobs(4)), blobs(4))
    finally:
        d.close()


def test_slots_and_processes_must_hold_something():
    with pytest.raises(ValueError, match="processes, slot_bytes and slots must be >= 1"):
        DecoderProcess("cpu", slot_bytes=0)
    with pytest.raises(ValueError, match="processes, slot_bytes and slots must be >= 1"):
        DecoderProcess("cpu", processes=0)


@pytest.fixture(scope="module")
def three():
    """Three children, each with slots of two and a half frames."""
    d = DecoderProcess("cpu", library="cv2", processes=3, slot_bytes=FRAME * 5 // 2)
    yield d
    d.close()


def test_several_children_split_a_call_in_order(three):
    assert three.processes == 3 and len({c.proc.pid for c in three._children}) == 3
    for count in (1, 2, 3, 7, 16):  # fewer frames than children; runs of 2-3 and of 5-6 (rounds)
        data = blobs(count)
        assert_frames_equal(three(data), data)
    assert set(three.last_seconds) == {"child", "fill", "transfer", "to_child", "from_child",
                                       "copy_out"}


def test_a_bad_frame_among_several_children_names_its_index_in_the_whole_call(three):
    data = blobs(7)  # runs 0-1, 2-3, 4-6
    data[5] = b"not a jpeg"
    with pytest.raises(DecodeError, match="frame 5 of the batch") as info:
        three(data)
    assert info.value.index == 5
    good = blobs(7)
    assert_frames_equal(three(good), good)  # every child answered: none is left mid-request


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_frames_equal_the_in_process_gpu_decoder():
    """CUDA IPC: two children decode into the parent's device slots; frames equal to the same
    library decoding in this process, on this process's device."""
    from ttball.kernels.prepost_image import gpu_jpeg_reason

    cuda = torch.device("cuda")
    if gpu_jpeg_reason(cuda):
        pytest.skip(gpu_jpeg_reason(cuda))
    d = DecoderProcess(cuda, library="nvjpeg", processes=2, slot_bytes=FRAME * 5 // 2)
    try:
        assert d.kind == "nvjpeg"
        data = blobs(5)
        got = d(data)
        want = JpegDecoder(cuda, library="nvjpeg")(data)
        for g, w in zip(got, want):
            assert g.device == w.device and torch.equal(g, w.contiguous())
    finally:
        d.close()


def test_a_child_that_fails_to_take_its_run_leaves_no_answer_behind(monkeypatch):
    """The second child's send fails after the first child got its run: the call raises, and
    the first child's answer is read then, not taken for the next call's."""
    d = DecoderProcess("cpu", library="cv2", processes=2, slot_bytes=FRAME * 4)
    try:
        second = d._children[1]

        def refuse(blobs):
            raise RuntimeError("the decode process exited (code -9)")

        monkeypatch.setattr(second, "send", refuse)
        with pytest.raises(RuntimeError, match="exited"):
            d(blobs(4))
        monkeypatch.undo()
        data = blobs(4, height=36)[::-1]
        assert_frames_equal(d(data), data)
    finally:
        d.close()


def test_a_child_that_does_not_answer_is_killed(monkeypatch):
    import ttball.kernels.decode_process as module

    d = DecoderProcess("cpu", library="cv2", slot_bytes=FRAME * 2)
    try:
        monkeypatch.setattr(module, "REPLY_TIMEOUT_S", 0.0)
        child = d._children[0]
        child.send(blobs(1))
        child.conn.recv()  # its answer, taken away: the parent now waits for nothing
        with pytest.raises(RuntimeError, match="did not answer in 0 s"):
            child.receive()
        child.proc.join(timeout=10)
        assert not child.proc.is_alive()
        monkeypatch.undo()
        data = blobs(2)
        assert_frames_equal(d(data), data)  # a new child
        assert d.restarts == 1
    finally:
        d.close()


def test_a_child_whose_parent_is_killed_exits(tmp_path):
    """A replica killed outright (Ray's ray.kill, SIGKILL) runs no exit handler: its decode
    children see their pipe close and end on their own, not orphaned."""
    import os
    import signal
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        from ttball.kernels.decode_process import DecoderProcess
        if __name__ == "__main__":
            d = DecoderProcess("cpu", library="cv2", processes=2, slot_bytes=1 << 16)
            print(" ".join(str(c.proc.pid) for c in d._children), flush=True)
            time.sleep(600)
    """))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 20
        alive = pids
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = [pid for pid in pids if _running(pid)]
        assert not alive, f"decode children {alive} outlived their killed parent"
    finally:
        parent.kill()


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie awaiting its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_prefetch_is_taken_by_a_call_with_the_same_bytes_and_dropped_by_another(three):
    hits, misses = three.ahead_hits, three.ahead_misses
    data = blobs(7)
    three.prefetch(data)
    assert_frames_equal(three([bytes(b) for b in data]), data)  # equal bytes, other objects
    assert (three.ahead_hits, three.ahead_misses) == (hits + 1, misses)
    three.prefetch(data)
    other = blobs(5)
    assert_frames_equal(three(other), other)  # the prefetch read and dropped, none left behind
    assert (three.ahead_hits, three.ahead_misses) == (hits + 1, misses + 1)
    three.prefetch(data)
    three.prefetch(other)  # a second prefetch drops the first
    assert_frames_equal(three(other), other)
    assert (three.ahead_hits, three.ahead_misses) == (hits + 2, misses + 2)
    three.prefetch(data)
    assert three([]) == []  # nothing to decode: the prefetch is dropped too
    assert_frames_equal(three(data), data)


def test_a_call_whose_frames_begin_with_a_prefetch_takes_it_and_decodes_the_rest(three):
    """The batch queued behind a push grew before it ran: the prefetched frames are taken, the
    others decoded afresh; a bad frame among those is named by its index in the call."""
    hits, misses = three.ahead_hits, three.ahead_misses
    data = blobs(9)
    three.prefetch(data[:4])
    assert_frames_equal(three(data), data)
    assert (three.ahead_hits, three.ahead_misses) == (hits + 1, misses)
    assert set(three.last_seconds) == {"child", "fill", "transfer", "to_child", "from_child",
                                       "copy_out"}
    bad = data[:6] + [b"not a jpeg"] + data[7:]
    three.prefetch(bad[:4])
    with pytest.raises(DecodeError, match="frame 6 of the batch") as info:
        three(bad)
    assert info.value.index == 6
    three.prefetch(data[1:5])  # not where the call begins: dropped
    assert_frames_equal(three(data), data)
    assert three.ahead_misses == misses + 1


def test_a_bad_frame_in_a_prefetch_is_raised_by_the_call_that_takes_it(three):
    data = blobs(7)
    data[4] = b"not a jpeg"
    three.prefetch(data)
    with pytest.raises(DecodeError, match="frame 4 of the batch") as info:
        three(data)
    assert info.value.index == 4
    three.prefetch(data)  # dropped: its bad frame is not the next call's error
    good = blobs(3)
    assert_frames_equal(three(good), good)


def test_a_child_that_dies_under_a_dropped_prefetch_is_started_again():
    d = DecoderProcess("cpu", library="cv2", slot_bytes=FRAME * 4)
    try:
        d.prefetch(blobs(2))
        d._children[0].proc.kill()
        d._children[0].proc.join()
        data = blobs(3)
        assert_frames_equal(d(data), data)  # the prefetch's answer never came: dropped
        assert d.restarts == 1 and d.ahead_misses == 1
    finally:
        d.close()


def test_then_is_sent_before_the_call_waits_and_taken_by_the_next_call(three):
    """``then``: the next call's frames go to the children before this call reads its own, so
    each child holds two requests at once (in rounds here: slots of 2.5 frames, runs of 3-4),
    and they come back in order, equal; the next call takes them as a prefetch."""
    hits, misses = three.ahead_hits, three.ahead_misses
    first, second, third = blobs(10), blobs(11), blobs(4)
    assert_frames_equal(three(first, then=second), first)
    assert_frames_equal(three(second, then=third), second)  # taken; third queued behind it
    assert_frames_equal(three(third), third)
    assert (three.ahead_hits, three.ahead_misses) == (hits + 2, misses)
    assert_frames_equal(three(first, then=second), first)
    assert_frames_equal(three(third), third)  # another call: ``second`` read and dropped
    assert three.ahead_misses == misses + 1
    assert three([], then=first) == []  # nothing to decode now, ``first`` sent all the same
    assert_frames_equal(three(first + third), first + third)  # taken, and the rest decoded
    assert (three.ahead_hits, three.ahead_misses) == (hits + 3, misses + 1)


def test_then_survives_a_bad_frame_in_the_call_before_it(three):
    """A call that raises (a frame that does not decode) leaves its ``then`` in flight for the
    call after it (a push retried without the bad upload drops it; an equal one takes it)."""
    data, after = blobs(7), blobs(5)
    bad = data[:2] + [b"not a jpeg"] + data[3:]
    with pytest.raises(DecodeError, match="frame 2 of the batch"):
        three(bad, then=after)
    hits = three.ahead_hits
    assert_frames_equal(three(after), after)
    assert three.ahead_hits == hits + 1
    three.prefetch(bad)  # a prefetch taken, with a bad frame, and ``then`` sent behind it
    with pytest.raises(DecodeError, match="frame 2 of the batch"):
        three(bad, then=after)
    assert_frames_equal(three(after), after)


def test_a_child_holds_no_more_requests_than_it_has_slots():
    d = DecoderProcess("cpu", library="cv2", slot_bytes=FRAME * 4)
    try:
        child = d._children[0]
        child.send(blobs(1))
        child.send(blobs(2))
        with pytest.raises(RuntimeError, match="as many requests as it has slots"):
            child.send(blobs(3))
        assert_frames_equal(child.receive()[0], blobs(1))
        assert_frames_equal(child.receive()[0], blobs(2))
    finally:
        d.close()


def test_a_child_that_dies_under_a_then_is_started_again_by_the_call_after():
    d = DecoderProcess("cpu", library="cv2", slot_bytes=FRAME * 4)
    try:
        data, after = blobs(2), blobs(3)
        assert_frames_equal(d(data, then=after), data)
        d._children[0].proc.kill()
        d._children[0].proc.join()
        fresh = blobs(4)
        assert_frames_equal(d(fresh), fresh)  # ``after`` never answered: dropped, child anew
        assert d.restarts == 1 and d.ahead_misses == 1
    finally:
        d.close()


def test_children_started_without_waiting_are_waited_for_once(monkeypatch):
    """wait=False: launched, not waited for, until wait_ready (a second call waits for
    nothing); then their slowest start, split, on the host's clock."""
    from ttball.kernels import decode_process

    waits: list[int] = []
    wait = decode_process._Child.wait_ready
    monkeypatch.setattr(decode_process._Child, "wait_ready",
                        lambda child: (waits.append(1), wait(child))[1])
    d = DecoderProcess("cpu", library="cv2", processes=2, wait=False)
    try:
        assert waits == [] and d.kind == "" and d.start_seconds() == {}
        d.wait_ready()
        d.wait_ready()
        assert len(waits) == 2 and d.kind == "cv2"
        start = d.start_seconds()
        assert set(start) == {"spawn", "decoder", "ready"}
        assert 0 <= start["spawn"] <= start["ready"] and 0 <= start["decoder"] <= start["ready"]
        assert_frames_equal(d(blobs(3)), blobs(3))
    finally:
        d.close()


def test_a_child_that_cannot_start_is_reported_when_waited_for():
    d = DecoderProcess("cpu", library="gif", wait=False)  # started: no error yet
    with pytest.raises(RuntimeError, match="the decode process could not start"):
        d.wait_ready()

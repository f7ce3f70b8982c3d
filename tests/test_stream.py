"""FrameStream: windows, ordering, duplicates and padding, with a fake network."""

import numpy as np
import pytest

from ttball.frames import Frame
from ttball.model.config import WeightsConfig
from ttball.stream import FrameStream, StreamOptions

CFG = WeightsConfig(input_height=16, input_width=32)


def frame(i: int, value: int | None = None) -> Frame:
    """A 32x16 frame whose pixels all equal ``value`` (default: the index), so content is known."""
    v = i if value is None else value
    return Frame(i, i / 30, np.full((16, 32, 3), v % 256, np.uint8))


def fake_probs(stream: FrameStream, window) -> np.ndarray:
    """Heatmap k gets one bright pixel at x = its frame's pixel value (identifies the frame)."""
    probs = np.zeros((3, 16, 32), np.float32)
    for k in range(3):
        value = int(window.pixels[3 * k, 0, 0])
        probs[k, 8, value % 32] = 0.9
    return probs


def run(stream: FrameStream, frames, interleave=True) -> list:
    rows, pending = [], []
    for f in frames:
        pending.extend(stream.push(f))
        if interleave:
            for w in pending:
                rows.extend(stream.complete(w, fake_probs(stream, w)))
            pending = []
    pending.extend(stream.finish())
    for w in pending:
        rows.extend(stream.complete(w, fake_probs(stream, w)))
    return rows + stream.drain()


@pytest.mark.parametrize("step", [1, 3])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 9, 10, 11])
@pytest.mark.parametrize("interleave", [True, False])
def test_every_frame_once_in_order_with_its_own_detection(step, count, interleave) -> None:
    stream = FrameStream(CFG, StreamOptions(step=step))
    rows = run(stream, [frame(i) for i in range(count)], interleave)
    assert [r.frame for r in rows] == list(range(count))
    assert all(r.visible for r in rows)
    assert [round(r.x) for r in rows] == list(range(count))  # each frame found its own ball


def test_window_counts() -> None:
    s1 = FrameStream(CFG, StreamOptions(step=1))
    run(s1, [frame(i) for i in range(10)])
    s3 = FrameStream(CFG, StreamOptions(step=3))
    run(s3, [frame(i) for i in range(10)])
    assert s1.windows_out == 8  # sliding: n - 2
    assert s3.windows_out == 4  # 3 full + 1 trailing


def test_step1_gathers_candidates_from_three_windows() -> None:
    stream = FrameStream(CFG, StreamOptions(step=1))
    seen = {}
    original = stream.complete

    def spy(window, probs):
        for s in set(window.slots):
            seen[s] = seen.get(s, 0) + 1
        return original(window, probs)

    stream.complete = spy  # type: ignore[method-assign]
    run(stream, [frame(i) for i in range(7)])
    assert [seen[s] for s in range(7)] == [1, 2, 3, 3, 3, 2, 1]


def test_duplicates_get_their_twins_result_and_are_not_windowed() -> None:
    stream = FrameStream(CFG, StreamOptions(step=3))
    frames = [frame(0), frame(1), frame(2, value=1), frame(3, value=1), frame(4), frame(5), frame(6)]
    rows = run(stream, frames)
    assert [r.frame for r in rows] == list(range(7))
    assert stream.duplicates == 2
    assert rows[2].x == rows[1].x == rows[3].x
    assert rows[2].time_s == pytest.approx(2 / 30)
    assert stream.windows_out == 2  # five distinct frames: one full window + one trailing


def test_a_windows_rows_leave_when_it_runs_and_a_later_twin_leaves_alone() -> None:
    """Step 3: a window's last frame does not wait for the next frame (it did, in case a
    duplicate of it came: the mean wait of a 60-fps session's rows 22.2 -> 16.7 ms). A
    duplicate that comes after its twin's row left gets the same ball at the next drain, in
    frame order, before any later frame's row."""
    stream = FrameStream(CFG, StreamOptions(step=3))
    out = []
    for i in range(3):
        for w in stream.push(frame(i)):
            out.extend(stream.complete(w, fake_probs(stream, w)))
    assert [r.frame for r in out] == [0, 1, 2]
    assert stream.pending_frames == 0
    assert stream.push(frame(3, value=2)) == []  # a twin of frame 2
    assert stream.pending_frames == 1
    [late] = stream.drain()
    assert (late.frame, late.x, late.y, late.visible) == (3, out[2].x, out[2].y, out[2].visible)
    assert late.time_s == pytest.approx(3 / 30)
    assert stream.push(frame(4)) == [] and stream.push(frame(5, value=5)) == []
    assert stream.push(frame(6, value=5)) == []  # a twin of frame 5 whose row has not left
    [w] = stream.push(frame(7))
    assert stream.push(frame(8, value=7)) == []  # its row has not left: joins frame 7's
    assert [r.frame for r in stream.complete(w, fake_probs(stream, w))] == [4, 5, 6, 7, 8]
    assert stream.duplicates == 3


def test_frame_size_change_is_refused() -> None:
    stream = FrameStream(CFG)
    stream.push(frame(0))
    with pytest.raises(ValueError, match="the stream's frames are 32x16"):
        stream.push(Frame(1, 0.1, np.zeros((20, 32, 3), np.uint8)))


def test_bad_options() -> None:
    with pytest.raises(ValueError, match="step must be 1 or 3"):
        StreamOptions(step=2)
    with pytest.raises(ValueError, match="threshold"):
        StreamOptions(threshold=1.5)
    for ssim in (-1.0, 0.0, 1.5, float("nan")):  # -1 made every frame a duplicate
        with pytest.raises(ValueError, match=r"dedup_ssim .* must be in \(0, 1\]"):
            StreamOptions(dedup_ssim=ssim)
    assert StreamOptions(dedup_ssim=1.0).dedup_ssim == 1.0


def test_drain_before_three_frames_keeps_their_pixels() -> None:
    # A live session may ask for results before its first window exists.
    stream = FrameStream(CFG, StreamOptions(step=1))
    stream.push(frame(0))
    stream.push(frame(1))
    assert stream.drain() == []
    [window] = stream.push(frame(2))
    assert window.pixels.shape == (9, 16, 32)
    assert [round(r.x) for r in stream.complete(window, fake_probs(stream, window))] == [0]


@pytest.mark.parametrize("step", [1, 3])
def test_a_window_completed_twice_is_refused_and_changes_nothing(step) -> None:
    """A second complete() of one window took its frames' open count below zero: with step 1
    their rows left before the other windows holding them had run (candidates lost)."""
    stream = FrameStream(CFG, StreamOptions(step=step))
    windows = [w for i in range(4) for w in stream.push(frame(i))]
    first = windows[0]
    rows = stream.complete(first, fake_probs(stream, first))
    with pytest.raises(ValueError, match="not open here: completed already"):
        stream.complete(first, fake_probs(stream, first))
    for w in windows[1:] + stream.finish():
        rows += stream.complete(w, fake_probs(stream, w))
    rows += stream.drain()
    assert [r.frame for r in rows] == [0, 1, 2, 3]
    assert [round(r.x) for r in rows] == [0, 1, 2, 3]


def test_a_window_of_another_stream_is_refused() -> None:
    a, b = FrameStream(CFG, stream_id="a"), FrameStream(CFG, stream_id="b")
    windows = [w for i in range(3) for w in a.push(frame(i))]
    with pytest.raises(ValueError, match="stream 'a' is not open here"):
        b.complete(windows[0], fake_probs(a, windows[0]))


def test_finish_twice_hands_out_no_window_again() -> None:
    """The second finish() handed out the trailing window again: its frames were completed
    twice (and, with the check above, refused)."""
    stream = FrameStream(CFG, StreamOptions(step=3))
    for i in range(4):
        stream.push(frame(i))
    assert len(stream.finish()) == 1
    assert stream.finish() == []
    assert stream.windows_out == 2


@pytest.mark.parametrize("bad", [np.zeros((16, 32), np.uint8), np.zeros((16, 32, 3), np.float32),
                                 np.zeros((16, 32, 4), np.uint8), np.zeros((0, 32, 3), np.uint8)])
def test_a_refused_frame_leaves_the_stream_as_it_was(bad) -> None:
    """A frame that failed (in OpenCV, or as float read as 0..255) was counted in frames_in and
    the first one fixed the stream's geometry."""
    stream = FrameStream(CFG)
    with pytest.raises(ValueError, match=r"frame 0 must be an \(H, W, 3\) uint8 RGB array"):
        stream.push(Frame(0, 0.0, bad))
    assert (stream.frames_in, stream.geometry) == (0, None)
    rows = run(stream, [frame(i) for i in range(3)])
    assert [r.frame for r in rows] == [0, 1, 2]


def test_a_frame_of_another_size_is_not_counted() -> None:
    stream = FrameStream(CFG)
    stream.push(frame(0))
    with pytest.raises(ValueError, match="the stream's frames are 32x16"):
        stream.push(Frame(1, 0.1, np.zeros((20, 32, 3), np.uint8)))
    assert stream.frames_in == 1

"""Online frames → windows → ball results, one stream (a video, or a live session) at a time.

:class:`FrameStream` is the state of one stream: the duplicate filter, the kept frames waiting
for a window, the candidates gathered for each frame and the tracker. It never runs the network:
``push`` hands out windows, somebody runs them (alone, or batched with other streams' windows),
and ``complete`` takes their heatmaps back, in window order, and returns finished frames in
frame order. ``ttball track`` and every server session use this same class, so they agree.

Step 3: non-overlapping windows, each kept frame predicted once. Step 1: a sliding window; each
frame gathers the candidates of the up to three windows that hold it. A trailing partial window
(step 3) or a stream shorter than three kept frames is padded with the nearest kept frames.
Duplicate frames are not windowed; they get their twin's result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ttball.frames import DuplicateFilter, Frame, check_rgb, resize
from ttball.model.config import WeightsConfig
from ttball.postprocess import Detection, FrameGeometry, check_threshold, detect
from ttball.results import FrameResult
from ttball.tracker import DEFAULT_MAX_JUMP_PX, OnlineTracker, check_max_jump


@dataclass
class Window:
    """Three kept frames, oldest first: ``pixels (9, h, w) uint8`` and their slot numbers."""

    stream_id: str
    slots: tuple[int, int, int]
    pixels: np.ndarray


@dataclass
class _Kept:
    index: int
    time_s: float
    pixels: np.ndarray | None
    twins: list[tuple[int, float]] = field(default_factory=list)
    candidates: list[Detection] = field(default_factory=list)
    open_windows: int = 0
    covered: bool = False


@dataclass(frozen=True)
class StreamOptions:
    step: int = 3
    threshold: float | None = None  # None: the weights' own score threshold
    dedup_ssim: float | None = None
    max_jump_px: float = DEFAULT_MAX_JUMP_PX

    def __post_init__(self) -> None:
        if self.step not in (1, 3):
            raise ValueError(f"step must be 1 or 3, got {self.step}")
        if self.threshold is not None:
            check_threshold(self.threshold)
        check_max_jump(self.max_jump_px)  # now, not when the stream starts
        if self.dedup_ssim is not None and not (0.0 < self.dedup_ssim <= 1.0):
            raise ValueError(f"dedup_ssim (an SSIM threshold) must be in (0, 1], got "
                             f"{self.dedup_ssim}")


class FrameStream:
    """The per-stream state between decoded frames and finished :class:`FrameResult` rows."""

    def __init__(
        self, config: WeightsConfig, options: StreamOptions | None = None, stream_id: str = ""
    ) -> None:
        self.config = config
        self.options = options or StreamOptions()
        self.threshold = self.options.threshold or config.score_threshold
        self.stream_id = stream_id
        self.geometry: FrameGeometry | None = None
        self._dedup = DuplicateFilter(self.options.dedup_ssim)
        self._tracker = OnlineTracker(self.options.max_jump_px)
        self._kept: list[_Kept] = []
        self._next_emit = 0
        self._late: list[FrameResult] = []  # twins of a frame whose row had left: next out
        self._last_ball: Detection | None = None
        self._finished = False
        self.frames_in = 0
        self.duplicates = 0
        self.windows_out = 0

    # -- frames in, windows out -------------------------------------------------------------
    def push(self, frame: Frame) -> list[Window]:
        """Add a decoded frame; returns the windows it completed (zero or one). A frame that
        is refused (not ``(H, W, 3) uint8``, another size) leaves the stream as it was."""
        check_rgb(frame.rgb, f"frame {frame.index}")
        h, w = frame.rgb.shape[:2]
        self._admit(frame.index, w, h)
        duplicate = self._dedup.is_duplicate(frame.rgb) and bool(self._kept)  # always remembers
        pixels = None if duplicate else resize(frame.rgb, self.config)
        return self._keep(frame.index, frame.time_s, pixels)

    # -- the two halves of push, shared with streams whose frames arrive already resized -----
    def _admit(self, index: int, width: int, height: int) -> None:
        """Check a frame of ``width`` × ``height``; the first fixes the stream's geometry."""
        if self._finished:
            raise RuntimeError("stream already finished")
        if self.geometry is None:
            self.geometry = FrameGeometry(width, height, self.config.input_width,
                                          self.config.input_height)
        elif (width, height) != (self.geometry.source_width, self.geometry.source_height):
            raise ValueError(
                f"frame {index} is {width}x{height}, the stream's frames are "
                f"{self.geometry.source_width}x{self.geometry.source_height}"
            )

    def _keep(self, index: int, time_s: float, pixels: Any) -> list[Window]:
        """Keep a frame's resized ``pixels``, or, with ``None``, record it as a twin of the last
        kept frame (a duplicate); returns the window it completes, if any."""
        self.frames_in += 1
        if pixels is None:
            self.duplicates += 1
            if self._next_emit == len(self._kept):  # its twin's row has left: it leaves alone
                self._late.append(_result(index, time_s, self._last_ball))
            else:
                self._kept[-1].twins.append((index, time_s))
            return []
        self._kept.append(_Kept(index, time_s, pixels))
        n = len(self._kept)
        if n >= 3 and (self.options.step == 1 or n % 3 == 0):
            return [self._window((n - 3, n - 2, n - 1))]
        return []

    def finish(self) -> list[Window]:
        """No more frames: the windows that cover the frames no full window reached (none
        when called again)."""
        if self._finished:
            return []
        self._finished = True
        n = len(self._kept)
        if n == 0:
            return []
        if n < 3:
            return [self._window(tuple([0] * (3 - n) + list(range(n))))]  # type: ignore[arg-type]
        if self.options.step == 3 and n % 3:
            return [self._window((n - 3, n - 2, n - 1))]
        return []

    def _window(self, slots: tuple[int, int, int]) -> Window:
        kept = [self._kept[s] for s in slots]
        for s in set(slots):
            self._kept[s].open_windows += 1
        pixels = np.concatenate([k.pixels for k in kept], axis=0)  # type: ignore[misc]
        self.windows_out += 1
        return Window(self.stream_id, slots, pixels)

    # -- heatmaps in, results out -----------------------------------------------------------
    def complete(self, window: Window, probs: np.ndarray) -> list[FrameResult]:
        """Take a window's probabilities ``(3, h, w)`` float32 back; return finished frames."""
        geometry = self.geometry  # set: _complete refuses a window unless one is open here
        return self._complete(window, lambda p: detect(probs[p], geometry, self.threshold))  # type: ignore[arg-type]

    def _complete(
        self, window: Window, candidates: Callable[[int], list[Detection]]
    ) -> list[FrameResult]:
        """:meth:`complete` with the candidates of window position ``p`` from ``candidates(p)``
        (asked only for the positions whose frame still needs them)."""
        if not all(0 <= s < len(self._kept) and self._kept[s].open_windows > 0
                   for s in window.slots):  # checked before anything changes
            raise ValueError(f"window {window.slots} of stream {window.stream_id!r} is not open "
                             "here: completed already, or handed out by another stream")
        seen: set[int] = set()
        for position, slot in enumerate(window.slots):
            if slot in seen:
                continue
            seen.add(slot)
            kept = self._kept[slot]
            kept.open_windows -= 1
            if self.options.step == 1 or not kept.covered:
                kept.candidates.extend(candidates(position))
            kept.covered = True
        return self._emit()

    def drain(self) -> list[FrameResult]:
        """After :meth:`finish` and every window completed: whatever is left, in order."""
        return self._emit()

    def _final(self, slot: int) -> bool:
        """Whether a kept frame's row can leave: its windows have run, and with step 1 no later
        window can hold it. With step 3 it does not wait for the next frame: a duplicate that
        comes after its row left gets the same ball on its own (``_late``)."""
        kept = self._kept[slot]
        if kept.open_windows > 0 or not kept.covered:
            return False
        if self._finished or self.options.step == 3:
            return True
        return slot < len(self._kept) - 2

    def _emit(self) -> list[FrameResult]:
        out, self._late = self._late, []  # (frame order: a late twin precedes any later frame)
        while self._next_emit < len(self._kept) and self._final(self._next_emit):
            kept = self._kept[self._next_emit]
            ball = self._tracker.update(kept.candidates)
            out.append(_result(kept.index, kept.time_s, ball))
            out.extend(_result(i, t, ball) for i, t in kept.twins)
            kept.candidates = []
            self._last_ball = ball
            self._next_emit += 1
        # A trailing window may still need the last three kept frames' pixels.
        last = min(self._next_emit, max(0, len(self._kept) - 3))
        for kept in self._kept[max(0, self._next_emit - 6) : last]:
            kept.pixels = None
        return out

    @property
    def pending_frames(self) -> int:
        return len(self._kept) - self._next_emit + len(self._late)


def _result(index: int, time_s: float, ball: Detection | None) -> FrameResult:
    if ball is None:
        return FrameResult.invisible(index, time_s)
    return FrameResult(
        frame=index,
        time_s=time_s,
        visible=True,
        x=ball.x,
        y=ball.y,
        blur_angle_deg=ball.blur_angle_deg,
        blur_length_px=ball.blur_length_px,
        score=ball.score,
    )

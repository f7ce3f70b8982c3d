"""A session's frames on the device: :class:`DeviceStream`, the windowing, padding, emit
order and tracking of :class:`~ttball.stream.FrameStream` for frames decoded, resized and
de-duplicated on the backend's device (:class:`DeviceWindow`: a window of device tensors), and
:class:`FrameRejected`, the error of a frame :class:`~ttball.kernels.prepost.GpuPipeline`
refuses before any session has changed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from torch import Tensor

from ttball.model.config import WeightsConfig
from ttball.postprocess import Detection
from ttball.results import FrameResult
from ttball.stream import FrameStream, StreamOptions, Window


class FrameRejected(ValueError):
    """A frame :meth:`GpuPipeline.push` refuses before any session has changed: it does not
    decode (``reason == "decode"``) or its size differs from its session's (``"size"``).
    ``index`` is its position in the pushed ``frames``; ``detail`` says what is wrong."""

    def __init__(self, index: int, reason: str, sid: str, detail: str) -> None:
        super().__init__(f"session {sid}, frame {index} of the push: {detail}")
        self.index, self.reason, self.detail = index, reason, detail


@dataclass
class DeviceWindow(Window):
    """A :class:`~ttball.stream.Window` whose frames are ``(3, h, w) uint8`` device tensors
    (``pixels`` stays empty: nothing is copied until the batch is stacked)."""

    frames: tuple[Tensor, ...] = ()


class DeviceStream(FrameStream):
    """:class:`FrameStream` with frames already decoded, resized and de-duplicated on the device
    and candidates found there: :meth:`push_device` replaces ``push``, :meth:`complete_found`
    replaces ``complete``; windowing, finish, emit order and the tracker are FrameStream's."""

    def __init__(self, config: WeightsConfig, options: StreamOptions | None = None,
                 stream_id: str = "") -> None:
        super().__init__(config, options, stream_id)
        if self.options.dedup_ssim is not None:
            raise ValueError("the device path drops exact duplicates only; dedup_ssim is not supported")

    def push(self, frame: object) -> list[Window]:  # type: ignore[override]
        raise TypeError("DeviceStream takes device frames: use push_device")

    def push_device(self, index: int, time_s: float, size: tuple[int, int], duplicate: bool,
                    small: Tensor) -> list[Window]:
        """One frame: its source ``size`` (width, height), whether it repeats the previous
        frame exactly, and its resized pixels ``(3, h, w) uint8``; ``FrameStream.push`` for
        frames decoded and resized on the device."""
        self._admit(index, *size)
        return self._keep(index, time_s, None if duplicate and self._kept else small)

    def _window(self, slots: tuple[int, int, int]) -> Window:
        for s in set(slots):
            self._kept[s].open_windows += 1
        self.windows_out += 1
        frames = tuple(self._kept[s].pixels for s in slots)
        return DeviceWindow(self.stream_id, slots, np.empty(0, np.uint8), frames)  # type: ignore[arg-type]

    def complete_found(self, window: Window, found: Sequence[list[Detection]]) -> list[FrameResult]:
        """A window's candidates per position (oldest first), found on the device;
        ``FrameStream.complete`` without the heatmaps."""
        return self._complete(window, lambda position: found[position])

"""JPEG bytes in, tracked positions out, with every pixel on the backend's device (issue 9's
end-to-end target: the worker at 12,000 frames/s on one H200, step 3).

:class:`GpuPipeline` serves many sessions at once. One :meth:`~GpuPipeline.push` takes the
JPEG frames that arrived for any sessions and:

1. decodes them as one batch (nvJPEG on the GPU where torchvision has CUDA, else ``cv2``):
   frames whose bytes repeat the session's previous frame are not decoded at all;
2. finds exact duplicates (pixels equal to the session's previous frame, as
   :class:`~ttball.frames.DuplicateFilter` does) on the device: one ``B``-bool copy to the host;
3. resizes on the device, bit-exact with ``cv2.resize`` (:class:`~.prepost_image.Resizer`);
4. keeps each session's recent resized frames on the device in a :class:`DeviceStream` (the
   windowing, padding, ordering and tracking of :class:`~ttball.stream.FrameStream`, which it
   subclasses), so a step-3 or step-1 window is three tensor references;
5. stacks all windows into batches of the sizes the backend was warmed for, normalises
   (:func:`ttball.frames.normalize`), runs the backend, applies the sigmoid and
   :func:`~.prepost_post.blob_stats`: ``max_blobs × 8`` numbers per heatmap cross to the host
   (plus the rare map that needs the exact host post-processing);
6. hands each frame's candidates to its stream's tracker: :class:`~ttball.results.FrameResult`
   rows per session, in frame order, equal to FrameStream + the CPU path.

Not supported here: the SSIM near-duplicate filter (``dedup_ssim``; refused, not ignored).
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ttball.backends.base import Backend, synchronize
from ttball.frames import normalize
from ttball.kernels.prepost_image import (
    DecodeError,
    JpegDecoder,
    Resizer,
    decode_cv2,
    gpu_jpeg_reason,
    stack_windows,
)
from ttball.kernels.prepost_post import (
    STATS,
    GraphedStats,
    PostOptions,
    blob_stats,
    detections,
    packed_stats,
)
from ttball.model.config import WeightsConfig
from ttball.postprocess import Detection, detect
from ttball.results import FrameResult
from ttball.stream import FrameStream, StreamOptions, Window

__all__ = [
    "DecodeError",
    "DeviceStream",
    "DeviceWindow",
    "FrameRejected",
    "GpuPipeline",
    "GraphedStats",
    "JpegDecoder",
    "PostOptions",
    "Resizer",
    "StageTimer",
    "blob_stats",
    "decode_cv2",
    "detections",
    "gpu_jpeg_reason",
    "packed_stats",
    "stack_windows",
]

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


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


class StageTimer:
    """Seconds per stage. ``sync=True`` waits for the device at each stage's end, so the time
    lands on the stage that spent it (costs the overlap; for measurement only)."""

    def __init__(self, device: torch.device, sync: bool = False) -> None:
        self.device, self.sync = device, sync
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.sync:
                synchronize(self.device)
            self.seconds[name] += time.perf_counter() - start


@dataclass
class _Session:
    stream: DeviceStream
    fps: float
    next_index: int = 0
    last_bytes: bytes | None = None
    last_frame: Tensor | None = None  # full-size (3, H, W) uint8, for the duplicate test
    last_small: Tensor | None = None  # the same frame resized
    rows: list[FrameResult] = field(default_factory=list)


class GpuPipeline:
    """Sessions' JPEG frames → decoded, resized, windowed, batched, run, post-processed on
    ``backend.device`` → per-session rows (see the module docstring for the steps)."""

    def __init__(
        self,
        backend: Backend,
        config: WeightsConfig,
        *,
        decoder: JpegDecoder | None = None,
        batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
        post: PostOptions | None = None,
        timer: StageTimer | None = None,
        graphs: bool | None = None,
        compile_resize: bool = False,
        max_batch: int | None = None,
        on_batch: Callable[[int, int], None] | None = None,
    ) -> None:
        """``graphs``: post-processing from CUDA graphs (default: on CUDA);
        ``compile_resize``: the resize fused by ``torch.compile``; ``max_batch``: windows per
        backend call at most (default: the largest batch size), each call padded up to one of
        ``batch_sizes``; ``on_batch(windows, padded_size)`` is called after every backend call."""
        self.backend, self.config = backend, config
        self.device = backend.device
        self.decoder = decoder or JpegDecoder(self.device)
        self.resizer = Resizer(config.input_height, config.input_width, compile=compile_resize)
        self.sizes = sorted(set(batch_sizes))
        self.max_batch = max_batch or self.sizes[-1]
        if not 1 <= self.max_batch <= self.sizes[-1]:
            raise ValueError(f"max_batch {self.max_batch} must be in 1..{self.sizes[-1]}, the "
                             "largest batch size")
        self.on_batch = on_batch
        self.post = post or PostOptions()
        use_graphs = self.device.type == "cuda" if graphs is None else graphs
        self._graphed = GraphedStats(self.post) if use_graphs else None
        self.graph_error: str | None = None
        self.timer = timer or StageTimer(self.device)
        self._sessions: dict[str, _Session] = {}
        self.fallbacks = 0  # heatmaps post-processed on the host
        self.heatmaps = 0

    # -- sessions ---------------------------------------------------------------------------------
    def open(self, sid: str, options: StreamOptions | None = None,
             fps: float = 30.0) -> DeviceStream:
        """A new session; its stream (read its counters and geometry; feed it through push)."""
        if sid in self._sessions:
            raise ValueError(f"session {sid!r} is already open")
        stream = DeviceStream(self.config, options, sid)
        self._sessions[sid] = _Session(stream, fps)
        return stream

    def close(self, sid: str) -> None:
        self._sessions.pop(sid, None)

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, sid: object) -> bool:
        return sid in self._sessions

    # -- frames in --------------------------------------------------------------------------------
    def push(self, frames: Sequence[tuple[str, bytes]],
             stamps: Sequence[tuple[int, float]] | None = None) -> dict[str, list[FrameResult]]:
        """JPEG frames ``(session id, bytes)`` in arrival order → rows each session finished.

        ``stamps``: each frame's ``(index, time_s)`` (increasing per session); default: the
        session's next index and ``index / fps``. A frame that does not decode or has another
        size than its session's raises :class:`FrameRejected` and nothing is taken."""
        sessions = [self._get(sid) for sid, _ in frames]
        with self.timer.stage("decode"):
            images, repeats = self._decode(frames, sessions)
        with self.timer.stage("preprocess"):
            smalls, duplicates = self._prepare(images, repeats, sessions)
        windows: list[Window] = []
        touched: dict[str, _Session] = {}
        for k, ((sid, _), session, image, small, dup) in enumerate(
                zip(frames, sessions, images, smalls, duplicates)):
            index, time_s = (stamps[k] if stamps is not None
                             else (session.next_index, session.next_index / session.fps))
            session.next_index = index + 1
            size = (image.shape[-1], image.shape[-2])
            windows.extend(session.stream.push_device(index, time_s, size, dup, small))
            touched[sid] = session
        self._run(windows)
        for session in touched.values():
            if session.stream.frames_in - session.stream.duplicates >= 3:
                session.rows.extend(session.stream.drain())
        return {sid: self._take(s) for sid, s in touched.items()}

    def finish(self, sid: str) -> list[FrameResult]:
        """No more frames for ``sid``: its last rows; the session is closed."""
        session = self._get(sid)
        self._run(session.stream.finish())
        session.rows.extend(session.stream.drain())
        self.close(sid)
        return self._take(session)

    def _get(self, sid: str) -> _Session:
        try:
            return self._sessions[sid]
        except KeyError:
            raise KeyError(f"no open session {sid!r}") from None

    @staticmethod
    def _take(session: _Session) -> list[FrameResult]:
        rows, session.rows = session.rows, []
        return rows

    def _decode(self, frames: Sequence[tuple[str, bytes]], sessions: Sequence[_Session]
                ) -> tuple[list[Tensor], list[bool]]:
        """Decode every frame whose bytes differ from its session's previous frame (a repeat
        reuses that frame's tensor). Sizes are checked before any session changes, so a bad
        frame never half-enters a stream."""
        last_bytes = {id(s): s.last_bytes if s.last_frame is not None else None for s in sessions}
        repeats, todo, where = [], [], []
        for position, ((_, data), session) in enumerate(zip(frames, sessions)):
            repeats.append(last_bytes[id(session)] == data)
            if not repeats[-1]:
                todo.append(data)
                where.append(position)
            last_bytes[id(session)] = data
        try:
            decoded = iter(self.decoder(todo))
        except DecodeError as exc:
            position = where[exc.index]
            raise FrameRejected(position, "decode", frames[position][0],
                                "not a decodable JPEG") from exc
        images: list[Tensor] = []
        last: dict[int, Tensor | None] = {id(s): s.last_frame for s in sessions}
        for position, ((sid, _), repeat, session) in enumerate(zip(frames, repeats, sessions)):
            image = last[id(session)] if repeat else next(decoded)
            assert image is not None
            self._check_size(position, sid, session, last[id(session)], image)
            images.append(image)
            last[id(session)] = image
        for (_, data), session in zip(frames, sessions):
            session.last_bytes = data
        return images, repeats

    @staticmethod
    def _check_size(position: int, sid: str, session: _Session, previous: Tensor | None,
                    image: Tensor) -> None:
        geom = session.stream.geometry
        expected = (geom.source_height, geom.source_width) if geom is not None else None
        if expected is None and previous is not None:
            expected = tuple(previous.shape[-2:])
        got = tuple(image.shape[-2:])
        if expected is not None and got != expected:
            raise FrameRejected(position, "size", sid,
                                f"frame is {got[1]}x{got[0]}, the session's frames are "
                                f"{expected[1]}x{expected[0]}")

    def _prepare(self, images: list[Tensor], repeats: list[bool], sessions: Sequence[_Session]
                 ) -> tuple[list[Tensor], list[bool]]:
        """Resized frames (grouped by source size) and duplicate flags.

        A frame is a duplicate when its pixels equal its session's previous frame. Resized
        copies are compared first (equal full frames have equal resized ones; one ``B``-bool
        copy to the host); only the rare pairs equal there are compared at full size."""
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, image in enumerate(images):
            groups[tuple(image.shape)].append(i)
        smalls: list[Tensor] = list(images)
        for members in groups.values():
            for i, small in zip(members, self.resizer(torch.stack([images[i] for i in members]))):
                smalls[i] = small
        previous: list[tuple[Tensor, Tensor] | None] = []
        last = {id(s): (s.last_frame, s.last_small) for s in sessions}
        for image, small, session in zip(images, smalls, sessions):
            before = last[id(session)]
            previous.append(None if before[0] is None else before)  # type: ignore[arg-type]
            last[id(session)] = (image, small)
        for session in sessions:
            session.last_frame, session.last_small = last[id(session)]
        duplicates = [r and p is not None for r, p in zip(repeats, previous)]
        pairs = [i for i, p in enumerate(previous) if p is not None and not repeats[i]]
        if pairs:
            prev = torch.stack([previous[i][1] for i in pairs])  # type: ignore[index]
            cur = torch.stack([smalls[i] for i in pairs])
            differ = (prev != cur).flatten(1).any(1).cpu().tolist()
            for i, diff in zip(pairs, differ):
                if not diff:
                    duplicates[i] = torch.equal(previous[i][0], images[i])  # type: ignore[index]
        return smalls, duplicates

    # -- windows through the backend ----------------------------------------------------------------
    def _run(self, windows: list[Window]) -> None:
        for start in range(0, len(windows), self.max_batch):
            self._run_batch(windows[start : start + self.max_batch])

    def _run_batch(self, windows: list[Window]) -> None:
        if not windows:
            return
        size = self.sizes[bisect.bisect_left(self.sizes, len(windows))]
        padded = windows + [windows[-1]] * (size - len(windows))
        streams = [self._sessions[w.stream_id].stream for w in windows]
        with self.timer.stage("preprocess"):
            batch = normalize(stack_windows([w.frames for w in padded]), self.config)  # type: ignore[attr-defined]
        with self.timer.stage("network"):
            logits = self.backend(batch)
        if self.on_batch is not None:
            self.on_batch(len(windows), size)
        with self.timer.stage("postprocess"):
            found = self._post(logits[: len(windows)], streams)
        with self.timer.stage("track"):
            for window, stream, per_position in zip(windows, streams, found):
                session = self._sessions[window.stream_id]
                session.rows.extend(stream.complete_found(window, per_position))

    def _post(self, logits: Tensor, streams: list[DeviceStream]) -> list[list[list[Detection]]]:
        """Logits ``(B, 3, h, w)`` → candidates per window and position."""
        thresholds = torch.tensor([s.threshold for s in streams for _ in range(3)],
                                  dtype=torch.float32).to(logits.device, non_blocking=True)
        packed = self._packed(logits, thresholds).cpu().numpy()
        stats = packed[:, :-1].reshape(len(packed), self.post.max_blobs, STATS)
        need_host = packed[:, -1].nonzero()[0]
        self.heatmaps += len(packed)
        self.fallbacks += len(need_host)
        host_maps = {}
        if need_host.size:
            maps = logits.flatten(0, 1)[torch.from_numpy(need_host).to(logits.device)]
            host_maps = dict(zip(need_host.tolist(), torch.sigmoid(maps.float()).cpu().numpy()))
        out = []
        for i, stream in enumerate(streams):
            geom = stream.geometry
            assert geom is not None
            per_position = []
            for j in range(3 * i, 3 * i + 3):
                if j in host_maps:
                    per_position.append(detect(host_maps[j], geom, stream.threshold))
                else:
                    per_position.append(detections(stats[j], geom))
            out.append(per_position)
        return out

    def _packed(self, logits: Tensor, thresholds: Tensor) -> Tensor:
        if self._graphed is not None:
            try:
                return self._graphed(logits, thresholds)
            except Exception as exc:  # noqa: BLE001  (reported in graph_error; eager is the same)
                self.graph_error = f"{type(exc).__name__}: {exc}"
                self._graphed = None
        return packed_stats(logits, thresholds, self.post)

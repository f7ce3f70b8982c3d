"""Videos for ``POST /v1/track`` arriving at a replica in pieces (``serve --ray``).

The ingress sends a video's body on as it arrives, in calls of at most
``RayServeSettings.upload_chunk_bytes`` routed by one key to one replica, then asks that replica
to track it. Until the sixty-first session it read the whole body into memory and sent it in
one call (a 1 GiB upload took the ingress to 2.76 GB). Here a replica keeps each key's pieces in
a temporary file: each piece must start where the file ends (a piece at another offset means the
replica holding the first ones died and the router moved the key here: 503 ``upload_lost``),
and a file no piece or track call has touched for ``ttl_s`` is deleted.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ttball.serve.settings import ApiError

UPLOAD_CHUNK_BYTES = 8 << 20  # the ingress's default piece (RayServeSettings.upload_chunk_bytes)
UPLOAD_PREFIX = "upload:"  # routing keys of uploads (never a session id: those are urlsafe tokens)


@dataclass
class _Upload:
    path: Path
    size: int
    touched: float


class VideoUploads:
    """The uploads a replica holds, by key. Thread-safe: pieces are written off the event loop."""

    def __init__(self, ttl_s: float, folder: str | None = None) -> None:
        self.ttl_s = ttl_s
        self.folder = folder
        self._held: dict[str, _Upload] = {}
        self._lock = threading.Lock()

    def append(self, key: str, suffix: str, offset: int, data: bytes) -> int:
        """Write ``data`` at ``offset`` of ``key``'s file (offset 0 starts it); its size after."""
        self.sweep()
        with self._lock:
            held = self._held.get(key)
            if held is None and offset == 0:
                fd, name = tempfile.mkstemp(prefix="ttball-track-", suffix=suffix, dir=self.folder)
                os.close(fd)
                held = self._held[key] = _Upload(Path(name), 0, time.monotonic())
            if held is None or held.size != offset:
                raise ApiError(503, "upload_lost",
                               "the replica that took the video's first bytes is gone; send the "
                               "video again", {"Retry-After": "1"})
            held.size = -1  # a piece being written: one at the same offset is refused
        try:
            with open(held.path, "ab") as f:
                f.write(data)
        except OSError as exc:
            self.discard(key)
            raise ApiError(503, "upload_failed", f"the replica could not store the video: "
                           f"{exc.strerror or exc}") from None
        except BaseException:
            self.discard(key)
            raise
        with self._lock:
            held.size, held.touched = offset + len(data), time.monotonic()
        return held.size

    def take(self, key: str) -> Path:
        """The whole file of ``key``; the caller deletes it."""
        with self._lock:
            held = self._held.pop(key, None)
        if held is None or held.size < 0:
            if held is not None:
                held.path.unlink(missing_ok=True)
            raise ApiError(503, "upload_lost", "the replica that took the video is gone; send "
                           "the video again", {"Retry-After": "1"})
        return held.path

    def discard(self, key: str) -> None:
        with self._lock:
            held = self._held.pop(key, None)
        if held is not None:
            held.path.unlink(missing_ok=True)

    def sweep(self, now: float | None = None) -> None:
        """Delete uploads untouched for ``ttl_s`` (their client or the ingress went away)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            stale = [k for k, u in self._held.items()
                     if u.size >= 0 and now - u.touched > self.ttl_s]
        for key in stale:
            self.discard(key)

    def __len__(self) -> int:
        return len(self._held)

"""A replica's /v1/track uploads (``serve --ray``): pieces in order make the video; a piece at
another offset, a lost key or a stale file never becomes a video."""

from __future__ import annotations

from pathlib import Path

import pytest

from ttball.distributed.serve_uploads import VideoUploads
from ttball.serve.settings import ApiError


def test_pieces_in_order_make_the_file(tmp_path: Path) -> None:
    uploads = VideoUploads(ttl_s=60, folder=str(tmp_path))
    assert uploads.append("k", ".mkv", 0, b"abc") == 3
    assert uploads.append("k", ".mkv", 3, b"defg") == 7
    path = uploads.take("k")
    assert path.suffix == ".mkv" and path.read_bytes() == b"abcdefg"
    assert len(uploads) == 0  # taken: the caller owns (and deletes) it


@pytest.mark.parametrize("offset", [0, 2, 4])
def test_a_piece_at_another_offset_is_refused_and_drops_nothing_else(tmp_path: Path,
                                                                     offset: int) -> None:
    uploads = VideoUploads(ttl_s=60, folder=str(tmp_path))
    uploads.append("k", ".mp4", 0, b"abc")
    with pytest.raises(ApiError) as refused:  # its first pieces went to a replica that died
        uploads.append("k", ".mp4", offset, b"x")
    assert (refused.value.status, refused.value.code) == (503, "upload_lost")
    assert uploads.take("k").read_bytes() == b"abc"


def test_a_key_never_started_here_is_lost(tmp_path: Path) -> None:
    uploads = VideoUploads(ttl_s=60, folder=str(tmp_path))
    with pytest.raises(ApiError, match="send the video again"):
        uploads.append("k", ".mp4", 8, b"x")  # the router moved the key mid-video
    with pytest.raises(ApiError) as lost:
        uploads.take("k")
    assert lost.value.code == "upload_lost"
    assert list(tmp_path.iterdir()) == []


def test_discard_and_sweep_delete_the_files(tmp_path: Path) -> None:
    uploads = VideoUploads(ttl_s=10, folder=str(tmp_path))
    uploads.append("gone", ".mp4", 0, b"a")
    uploads.append("stale", ".mp4", 0, b"b")
    uploads.append("fresh", ".mp4", 0, b"c")
    uploads.discard("gone")
    uploads.discard("gone")  # twice: nothing left to do
    uploads._held["stale"].touched -= 11
    uploads.sweep()
    assert len(uploads) == 1 and [p.read_bytes() for p in tmp_path.iterdir()] == [b"c"]


def test_a_failed_write_is_a_503_and_leaves_no_file(tmp_path: Path, monkeypatch) -> None:
    import errno

    import ttball.distributed.serve_uploads as module

    uploads = VideoUploads(ttl_s=60, folder=str(tmp_path))
    uploads.append("k", ".mp4", 0, b"a")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(module, "open", full, raising=False)
    with pytest.raises(ApiError) as failed:
        uploads.append("k", ".mp4", 1, b"b")
    assert (failed.value.status, failed.value.code) == (503, "upload_failed")
    assert "No space left" in failed.value.message
    assert len(uploads) == 0 and list(tmp_path.iterdir()) == []

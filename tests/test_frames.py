from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from conftest import draw_clip, with_exif_orientation

from ttball.errors import VideoError
from ttball.frames import DuplicateFilter, FrameSource, preprocess, resize, ssim
from ttball.model.config import WeightsConfig


def test_video_decodes_every_frame_with_times(clip: Path) -> None:
    src = FrameSource(clip)
    frames = list(src)
    assert [f.index for f in frames] == list(range(12))
    assert frames[3].time_s == pytest.approx(3 / 30)
    assert frames[0].rgb.shape == (180, 320, 3) and frames[0].rgb.dtype == np.uint8
    assert (src.info.width, src.info.height, src.info.fps) == (320, 180, 30.0)
    # RGB, not BGR: the table is drawn as BGR (40, 90, 30) → RGB (30, 90, 40)
    assert tuple(frames[0].rgb[5, 5]) == pytest.approx((30, 90, 40), abs=6)


def test_image_folder_skips_and_counts_unreadable_images(tmp_path: Path) -> None:
    for i in range(5):
        cv2.imwrite(str(tmp_path / f"f{i:03d}.png"), np.full((40, 60, 3), i * 10, np.uint8))
    (tmp_path / "f002.png").write_bytes(b"broken")
    src = FrameSource(tmp_path)
    assert [f.index for f in src] == [0, 1, 3, 4]
    assert src.info.corrupt_frames == [2]


def test_an_image_of_another_size_is_skipped_as_such_not_as_corrupt(tmp_path: Path) -> None:
    """A frame of another size decoded fine; ``track`` called it corrupt."""
    for i in range(4):
        size = (40, 60, 3) if i != 2 else (80, 120, 3)
        cv2.imwrite(str(tmp_path / f"f{i:03d}.png"), np.full(size, i * 10, np.uint8))
    src = FrameSource(tmp_path)
    assert [f.index for f in src] == [0, 1, 3]
    assert src.info.corrupt_frames == [] and src.info.other_size_frames == [2]


def test_image_folder_reads_a_jpeg_as_stored_whatever_its_exif_orientation(tmp_path: Path) -> None:
    """Frames are used as stored, as the server's decoders use them: a JPEG turned by its EXIF
    orientation would be 40 x 60 among frames of 60 x 40 and counted corrupt."""
    img = np.zeros((40, 60, 3), np.uint8)
    img[:, :10] = 255
    data = cv2.imencode(".jpg", img)[1].tobytes()
    for i in range(3):
        (tmp_path / f"f{i:03d}.jpg").write_bytes(with_exif_orientation(data, 6) if i == 1 else data)
    frames = list(src := FrameSource(tmp_path))
    assert [f.index for f in frames] == [0, 1, 2] and src.info.corrupt_frames == []
    assert frames[1].rgb.shape == (40, 60, 3) and frames[1].rgb[:, :8].min() > 200


def test_corrupt_frame_in_the_middle_of_a_video(tmp_path: Path) -> None:
    path = tmp_path / "clip.avi"
    draw_clip(path, frames=12, codec="MJPG")
    data = bytearray(path.read_bytes())
    starts = [i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] == 0xD8]
    data[starts[5] + 2 : starts[5] + 600] = b"\x55" * 598
    path.write_bytes(bytes(data))
    src = FrameSource(path)
    assert [f.index for f in src] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    assert src.info.corrupt_frames == [5]


@pytest.mark.parametrize("content", [b"", b"this is not a video"])
def test_not_a_video(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.mp4"
    path.write_bytes(content)
    with pytest.raises(VideoError, match="not a video"):
        FrameSource(path)


def test_missing_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match="no such file"):
        FrameSource(tmp_path / "nope.mp4")
    with pytest.raises(VideoError, match="holds no images"):
        FrameSource(tmp_path)


def test_preprocess_resizes_straight_and_normalises() -> None:
    cfg = WeightsConfig(input_height=8, input_width=16)
    rgb = np.zeros((30, 90, 3), np.uint8)
    rgb[..., 0] = 255  # pure red
    small = resize(rgb, cfg)
    assert small.shape == (3, 8, 16) and small.dtype == np.uint8
    x = preprocess([rgb, rgb, np.zeros_like(rgb)], cfg)
    assert x.shape == (1, 9, 8, 16) and x.dtype == torch.float32
    torch.testing.assert_close(x[0, 0], torch.full((8, 16), (1 - 0.485) / 0.229))
    torch.testing.assert_close(x[0, 1], torch.full((8, 16), (0 - 0.456) / 0.224))
    torch.testing.assert_close(x[0, 8], torch.full((8, 16), (0 - 0.406) / 0.225))


def test_exact_duplicates_only_by_default() -> None:
    f = DuplicateFilter()
    a = np.random.default_rng(0).integers(0, 255, (72, 128, 3), dtype=np.uint8)
    b = a.copy()
    b[0, 0, 0] ^= 1  # one bit differs: not an exact duplicate
    assert f.is_duplicate(a) is False
    assert f.is_duplicate(a.copy()) is True
    assert f.is_duplicate(b) is False


def test_near_duplicates_with_ssim_threshold() -> None:
    rng = np.random.default_rng(0)
    base = cv2.GaussianBlur(rng.integers(0, 255, (144, 256, 3), dtype=np.uint8), (9, 9), 3)
    noisy = np.clip(base.astype(int) + rng.integers(-1, 2, base.shape), 0, 255).astype(np.uint8)
    other = np.roll(base, 40, axis=1)
    f = DuplicateFilter(ssim_threshold=0.99)
    assert not f.is_duplicate(base)
    assert f.is_duplicate(noisy)
    assert not f.is_duplicate(other)


def test_ssim_identity_and_difference() -> None:
    a = np.random.default_rng(1).integers(0, 255, (64, 64), dtype=np.uint8)
    assert ssim(a, a) == pytest.approx(1.0)
    assert ssim(a, 255 - a) < 0.1


def test_preprocess_refuses_frames_it_would_misread() -> None:
    """Float frames in 0..1 were normalised as 0..255 (mean -1.98 for 0.21), with no error;
    two frames, gray or channels-first ones failed inside torch or OpenCV."""
    config = WeightsConfig(input_height=72, input_width=128)
    rgb = np.zeros((90, 160, 3), np.uint8)
    assert preprocess([rgb] * 3, config).shape == (1, 9, 72, 128)
    assert preprocess((rgb, rgb, rgb), config).shape == (1, 9, 72, 128)
    unit = (rgb / 255.0).astype(np.float32)
    bad = [
        ([rgb] * 2, "a list of 3 frames"),
        (np.stack([rgb] * 3), "got an array of shape"),
        ([rgb, unit, rgb], r"frame 1 must be an \(H, W, 3\) uint8 RGB array, got float32"),
        ([rgb.astype(np.uint16)] * 3, "got uint16"),
        ([rgb[..., 0]] * 3, r"got uint8 array of shape \(90, 160\)"),
        ([rgb.transpose(2, 0, 1)] * 3, r"of shape \(3, 90, 160\)"),
        ([rgb.tolist()] * 3, "got list"),
    ]
    for frames, message in bad:
        with pytest.raises(ValueError, match=message):
            preprocess(frames, config)
    with pytest.raises(TypeError, match="config must be a WeightsConfig"):
        preprocess([rgb] * 3, object())  # e.g. the model instead of model.config


@pytest.mark.parametrize("fps", [-5, 0, float("nan"), float("inf"), "30"])
def test_frame_source_refuses_a_frame_rate_that_is_not_positive(tmp_path: Path, fps) -> None:
    """On an image folder -5 gave negative times and nan NaN times; on a video -5 was replaced
    by 30 without a word; "30" failed later with a TypeError."""
    with pytest.raises(ValueError, match="fps must be a positive number"):
        FrameSource(tmp_path, fps=fps)

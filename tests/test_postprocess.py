import math

import numpy as np
import pytest

from ttball.postprocess import FrameGeometry, detect, detect_logits

H, W = 288, 512
SAME = FrameGeometry(W, H, W, H)


def blob(u0: float, v0: float, angle_deg: float, half_len: float, half_width: float = 3.0,
         peak: float = 0.95) -> np.ndarray:
    """A Gaussian streak whose 0.5 contour is an ellipse with semi-axes half_len, half_width."""
    vs, us = np.mgrid[0:H, 0:W].astype(np.float64)
    t = math.radians(angle_deg)
    du, dv = us - u0, vs - v0
    along = du * math.cos(t) + dv * math.sin(t)
    across = -du * math.sin(t) + dv * math.cos(t)
    k = 2 * math.log(2 * peak)  # value 0.5 on the ellipse (along/a)^2 + (across/b)^2 = 1
    return (peak * np.exp(-k / 2 * ((along / half_len) ** 2 + (across / half_width) ** 2))).astype(np.float32)


@pytest.mark.parametrize("angle", [0.0, 30.0, -45.0, 60.0, 89.0])
def test_elongated_blob_angle_centroid_length(angle: float) -> None:
    prob = blob(200.3, 140.7, angle, half_len=12.0)
    [d] = detect(prob, SAME)
    assert abs(d.x - 200.3) < 0.1 and abs(d.y - 140.7) < 0.1
    diff = (d.blur_angle_deg - angle + 90) % 180 - 90
    assert abs(diff) < 2.0
    assert abs(d.blur_length_px - 12.0) < 1.0
    assert -90 < d.blur_angle_deg <= 90


def test_centroid_bias_from_the_mask_edge_stays_small_at_any_angle() -> None:
    # The 0.5 contour cuts pixels unevenly at sub-pixel offsets: the weighted centroid of the
    # mask's pixels moves by up to ~0.19 px (measured over this sweep), never more than 0.2.
    for angle in range(-85, 90, 5):
        for u, v in ((200.3, 140.7), (100.1, 50.45), (300.77, 200.2)):
            [d] = detect(blob(u, v, angle, half_len=12.0), SAME)
            assert abs(d.x - u) < 0.2 and abs(d.y - v) < 0.2
            assert abs((d.blur_angle_deg - angle + 90) % 180 - 90) < 2.0


def test_positions_map_back_to_the_original_frame() -> None:
    geom = FrameGeometry(1280, 720, W, H)  # 2.5x in both directions
    prob = blob(100.0, 50.0, 0.0, half_len=8.0)
    [d] = detect(prob, geom)
    assert d.x == pytest.approx((100.0 + 0.5) * 2.5 - 0.5, abs=0.1)
    assert d.y == pytest.approx((50.0 + 0.5) * 2.5 - 0.5, abs=0.1)
    assert d.blur_length_px == pytest.approx(8.0 * 2.5, abs=2.5)


def test_anisotropic_scale_changes_the_angle() -> None:
    geom = FrameGeometry(512, 576, W, H)  # y stretched 2x
    [d] = detect(blob(256, 144, 45.0, half_len=15.0), geom)
    assert d.blur_angle_deg == pytest.approx(math.degrees(math.atan2(2, 1)), abs=2.0)


def test_two_blobs_best_score_first() -> None:
    prob = np.maximum(blob(100, 100, 0, 6.0, peak=0.7), blob(400, 200, 0, 10.0, peak=0.99))
    found = detect(prob, SAME)
    assert len(found) == 2
    assert found[0].x == pytest.approx(400, abs=0.1) and found[1].x == pytest.approx(100, abs=0.1)
    assert found[0].score > found[1].score


def test_empty_map_and_below_threshold() -> None:
    assert detect(np.zeros((H, W), np.float32), SAME) == []
    assert detect(np.full((H, W), 0.5, np.float32), SAME) == []  # max not ABOVE threshold
    assert detect(blob(100, 100, 0, 6.0, peak=0.7), SAME, threshold=0.8) == []


def test_blob_touching_the_border() -> None:
    prob = blob(0.0, 144.0, 0.0, half_len=10.0)
    [d] = detect(prob, SAME)
    assert 0 <= d.x < 10  # only the right half is inside: centroid moves inwards
    assert d.y == pytest.approx(144.0, abs=0.1)
    assert d.blur_length_px == pytest.approx(5.0, abs=1.0)


def test_single_pixel_blob_has_no_blur() -> None:
    prob = np.zeros((H, W), np.float32)
    prob[10, 20] = 0.9
    [d] = detect(prob, SAME)
    assert (d.x, d.y, d.blur_length_px, d.score) == (20.0, 10.0, 0.0, pytest.approx(0.9))


def test_logits_go_through_sigmoid() -> None:
    logits = np.full((H, W), -10.0, np.float32)
    logits[50:53, 60:63] = 3.0
    [d] = detect_logits(logits, SAME)
    assert d.x == pytest.approx(61.0) and d.y == pytest.approx(51.0)


def test_detect_refuses_a_map_its_geometry_does_not_describe() -> None:
    """A map of another size than the geometry's gave positions scaled wrongly, and no error
    (a 72x128 map read as 288x512: x 154.5 for 619.5); a stack of maps or a 1-D array failed
    inside OpenCV or numpy."""
    geom = FrameGeometry(1280, 720, 128, 72)
    for shape in [(288, 512), (3, 72, 128), (1, 72, 128), (72 * 128,)]:
        with pytest.raises(ValueError, match=r"\(H, W\) = \(72, 128\).*got shape"):
            detect(np.zeros(shape, np.float32), geom)


def test_detect_takes_a_cpu_tensor_and_refuses_thresholds_outside_0_1() -> None:
    import torch

    geom = FrameGeometry(1280, 720, 128, 72)
    prob = np.zeros((72, 128), np.float32)
    prob[10, 20] = 0.9
    assert detect(torch.from_numpy(prob), geom) == detect(prob, geom) != []
    assert detect_logits(torch.zeros(72, 128), geom) == []
    for threshold in (0.0, 1.0, 5.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="threshold must be between 0 and 1"):
            detect(prob, geom, threshold)


@pytest.mark.parametrize("sizes", [(0, 720, 128, 72), (1280, -720, 128, 72), (1280.5, 720, 128, 72)])
def test_frame_geometry_refuses_sizes_that_are_not_positive_integers(sizes) -> None:
    with pytest.raises(ValueError, match="positive integers"):
        FrameGeometry(*sizes)

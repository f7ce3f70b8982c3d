"""The training data pipeline: workers send pixels and numbers, the device makes the rest."""

import itertools
import json

import numpy as np
import pytest
import torch

from ttball.cli import COMMANDS, main
from ttball.frames import normalize
from ttball.model.config import WeightsConfig
from ttball.results import FrameResult
from ttball.synth import ClipConfig, clip_seed, plan_clip
from ttball.train import TrainConfig, WindowStream
from ttball.train_data import Window, jitter_lut, to_device
from ttball.train_targets import build_targets, draw_target, target_params

NET = (512, 288)
ROWS = [
    FrameResult(0, 0.0, True, x=640.4, y=300.2, blur_angle_deg=35.0, blur_length_px=30.0),
    FrameResult(1, 0.0, True, x=3.0, y=710.0, blur_angle_deg=-60.0, blur_length_px=12.0),
    FrameResult.invisible(2, 0.0),
    FrameResult(3, 0.0, True, x=1270.0, y=20.0, blur_angle_deg=90.0, blur_length_px=4.0),
]


@pytest.mark.parametrize("frames, top, left, flip", [
    ((0, 1, 2), 0, 0, False), ((0, 1, 2), 60, 200, True), ((3, 0, 1), 0, 256, False),
    ((1, 3, 0), 144, 0, True),
])
def test_device_targets_equal_the_drawn_maps_cut_like_a_window(frames, top, left, flip) -> None:
    maps = draw_target(ROWS, (1280, 720), NET)[list(frames)]
    if flip:
        maps = maps[..., ::-1]
    want = maps[:, top : top + 144, left : left + 256]
    params = torch.from_numpy(target_params(ROWS, (1280, 720), NET)[list(frames)])[None]
    got = build_targets(params, torch.tensor([[top, left, int(flip)]]), (144, 256), NET[0])
    torch.testing.assert_close(got[0], torch.from_numpy(np.ascontiguousarray(want)), atol=1e-6, rtol=0)


def test_jitter_table_and_normalisation_equal_jittering_the_pixels() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (2, 9, 8, 16), dtype=np.uint8)
    luts = [jitter_lut(np.random.default_rng(s)) for s in (0, 1)]
    gains = [np.random.default_rng(s) for s in (0, 1)]
    ref = []
    for xi, g in zip(x, gains):  # the first implementation's _jitter, drawing the same numbers
        if g.random() < 0.2:
            ref.append(xi)
            continue
        gain, bias = g.uniform(0.7, 1.3), g.uniform(-25, 25)
        ref.append(np.clip(xi.astype(np.float32) * gain + bias, 0, 255).astype(np.uint8))
    config = WeightsConfig(name="t", input_height=8, input_width=16)
    batch = Window(torch.from_numpy(x), torch.from_numpy(np.stack(luts)), torch.zeros(2, 3, 10),
                   torch.zeros(2, 3, dtype=torch.int32), torch.zeros(2, 3, dtype=torch.float64))
    got, y = to_device(batch, config, torch.device("cpu"))
    assert torch.equal(got, normalize(torch.from_numpy(np.stack(ref)), config))
    assert y.shape == (2, 3, 8, 16) and y.max() == 0


@pytest.mark.parametrize("seed", [1, 11])  # JPEG 87 and 66, with noise and a gain change
def test_a_region_renders_the_same_pixels_as_the_whole_frame(seed) -> None:
    plan = plan_clip(clip_seed(1, seed), ClipConfig(size=(640, 360), frames=3))
    assert plan.effects.jpeg_quality and plan.effects.noise_bank
    whole = list(plan.frames())
    regions = [(37, 5, 300, 200), (0, 100, 17, 360), (400, 290, 640, 360)]
    parts = list(plan.frames([True, False, True], regions))
    for i, part in zip((0, 2), parts):
        x0, y0, x1, y1 = regions[i]
        assert np.array_equal(part[y0:y1, x0:x1], whole[i][y0:y1, x0:x1])


def _windows(cfg: TrainConfig, crop, n: int) -> list[Window]:
    return list(itertools.islice(iter(WindowStream(cfg, crop)), n))


def test_windows_are_reproducible_and_match_their_targets() -> None:
    cfg = TrainConfig(synth_frames=5, windows_per_clip=3, seed=4, synth_seed=2)
    a, b = _windows(cfg, (32, 64), 6), _windows(cfg, (32, 64), 6)
    for u, v in zip(a, b):
        assert all(torch.equal(s, t) for s, t in zip(u[:4], v[:4]))
    assert a[0].x.shape == (9, 32, 64) and a[0].x.dtype == torch.uint8
    assert a[0].targets.shape == (3, 10) and a[0].cost.dtype == torch.float64
    other = _windows(TrainConfig(synth_frames=5, windows_per_clip=3, seed=5, synth_seed=2), (32, 64), 6)
    assert not all(torch.equal(u.x, v.x) for u, v in zip(a, other))
    full = _windows(cfg, None, 1)[0]
    assert full.x.shape == (9, 288, 512) and full.where[:2].tolist() == [0, 0]


def test_cli_data_only_reports_the_pipeline(capsys) -> None:
    COMMANDS.setdefault("train", ("ttball.cli.train", "train"))
    assert main(["train", "--data-only", "--steps", "2", "--batch", "2", "--crop", "32x64",
                 "--workers", "0", "--synth-frames", "4", "--windows-per-clip", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["steps"] == 2 and report["windows_per_s"] > 0 and report["limit"] == "data"
    assert report["kb_per_window"] < 100  # 32x64 crops: 18 KB of pixels, a few hundred bytes else


def test_data_workers_start_after_opencv_used_its_threads() -> None:
    """A worker forked after this process had resized with OpenCV's thread pool hung in its
    own ``cv2.setNumThreads(1)`` (the pool's locks without its threads): ``train`` hung after
    its clip checks, and this file's tests after any test that tracked. Its own process, so the
    pool's state is this test's."""
    import subprocess
    import sys

    script = (
        "import numpy as np, cv2\n"
        "from ttball.train import TrainConfig\n"
        "from ttball.train_data import loader\n"
        "cv2.setNumThreads(2)\n"
        "img = np.zeros((1080, 1920, 3), np.uint8)\n"
        "for _ in range(20):\n"
        "    cv2.resize(img, (640, 360))\n"
        "batch = next(loader(TrainConfig(synth_frames=4, windows_per_clip=1), (64, 64), 1, 1))\n"
        "print('ok', tuple(batch.x.shape), cv2.getNumThreads())\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True,
                              text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("the data worker hung")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", "(1,", "9,", "64,", "64)", "2"]

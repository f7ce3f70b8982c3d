import json

import pytest
import torch

from ttball.cli import COMMANDS, main
from ttball.model import BlurBall, load_model
from ttball.postprocess import FrameGeometry, detect
from ttball.results import FrameResult
from ttball.train import draw_target, focal_wbce


@pytest.mark.parametrize("angle, half", [(0.0, 20.0), (35.0, 30.0), (-60.0, 25.0), (90.0, 12.0)])
def test_target_reads_back_as_the_ground_truth(angle, half) -> None:
    row = FrameResult(0, 0.0, True, x=640.4, y=300.2, blur_angle_deg=angle, blur_length_px=half)
    [target] = draw_target([row], (1280, 720), (512, 288))
    [d] = detect(target, FrameGeometry(1280, 720, 512, 288))
    assert (d.x, d.y) == (pytest.approx(640.4, abs=1.0), pytest.approx(300.2, abs=1.0))
    assert abs((d.blur_angle_deg - angle + 90) % 180 - 90) < 4.0
    assert d.blur_length_px == pytest.approx(half, abs=2.5)  # 1 heatmap px = 2.5 source px


def test_invisible_rows_give_empty_targets() -> None:
    t = draw_target([FrameResult.invisible(0, 0.0)], (640, 360), (512, 288))
    assert t.shape == (1, 288, 512) and t.max() == 0


def test_loss_is_small_for_right_and_large_for_wrong_logits() -> None:
    y = torch.zeros(1, 3, 8, 8)
    y[0, :, 4, 4] = 1
    right = torch.where(y > 0, 8.0, -8.0)
    assert focal_wbce(right, y) < 1e-4 < focal_wbce(-right, y)


def test_a_few_steps_on_one_batch_lower_the_loss() -> None:
    torch.manual_seed(0)
    model = BlurBall().train()
    rows = [FrameResult(i, 0.0, True, x=30 + 4 * i, y=20, blur_angle_deg=0, blur_length_px=4) for i in range(3)]
    y = torch.from_numpy(draw_target(rows, (64, 32), (64, 32)))[None]
    x = torch.randn(1, 9, 32, 64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(4):
        loss = focal_wbce(model(x)[0], y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0] * 0.8, losses


@pytest.mark.slow
def test_cli_trains_saves_and_resumes(tmp_path) -> None:
    COMMANDS.setdefault("train", ("ttball.cli.train", "train"))
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--batch", "2", "--crop", "32x64", "--full-frame-every", "0",
            "--workers", "0", "--synth-frames", "6", "--windows-per-clip", "2", "--device", "cpu",
            "--quiet", "--checkpoint-every", "1"]
    assert main([*args, "--steps", "2"]) == 0
    model = load_model(out / "weights.safetensors")
    assert model.config.name == "ttball-synth" and "2 steps" in model.config.source
    assert main([*args, "--steps", "3", "--name", "club-court-2"]) == 0
    summary = json.loads((out / "train.json").read_text())
    assert summary["steps"] == 3 and summary["windows"] == 2  # resumed: one more step only
    assert load_model(out / "weights.safetensors").config.name == "club-court-2"


@pytest.mark.slow
def test_compiled_training_step_matches_eager(tmp_path) -> None:
    """--compile trains the same network: same first loss, same weights after one step."""
    from ttball.train import TrainConfig, _lr_at, train

    runs = {}
    for compiled in (False, True):
        cfg = TrainConfig(out=str(tmp_path / f"run-{compiled}"), steps=1, batch=2, crop=(32, 64),
                          full_frame_every=0, workers=0, synth_frames=6, windows_per_clip=2,
                          checkpoint_every=1, compile=compiled)
        runs[compiled] = train(cfg, device="cpu", progress=False)
    assert runs[True]["history"][-1]["loss"] == pytest.approx(runs[False]["history"][-1]["loss"],
                                                              rel=1e-4)
    # Adam's first step moves every weight by about ±lr whatever the gradient's size, so a
    # gradient that is ~0 in both runs may step either way: the runs differ by at most 2·lr
    # per weight, and on all but a few weights by far less.
    lr = _lr_at(0, cfg)
    eager, compiled = (load_model(tmp_path / f"run-{c}" / "weights.safetensors") for c in (False, True))
    diffs = torch.cat([(a.float() - b.float()).abs().flatten() for a, b in
                       zip(eager.state_dict().values(), compiled.state_dict().values())])
    assert diffs.max() <= 2 * lr + 1e-6  # + float32 rounding of weights near 1 (BN scales)
    assert (diffs > 0.1 * lr).float().mean() < 0.01

"""Training BlurBall on synthetic rallies (``ttball.synth``) and/or labelled clips.

Data (``ttball.train_data``): each worker renders (or decodes) a clip, then cuts
``windows_per_clip`` random 3-frame windows from it at the network's size, each a random crop
(``crop``; the network is fully convolutional) with a random horizontal flip, temporal reversal
and brightness/contrast jitter. Targets (``ttball.train_targets``) follow the blur: a Gaussian
"capsule" along the streak whose 0.5 contour has the streak's half-length, so post-processing
reads the ground-truth blur length and angle back from a perfect prediction. Workers send uint8
pixels and a few numbers per frame; jitter, normalisation and target maps are made on the
training device.

Loss: the weighted binary cross-entropy of TrackNetV2/WASB,
``-(1-p)^2 y log p - p^2 (1-y) log(1-p)``, which keeps the rare ball pixels from drowning.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ttball.errors import CheckpointError, UserError
from ttball.model import BlurBall, load_model, save_checkpoint
from ttball.model.config import WeightsConfig
from ttball.model.weights import check_state_dict, error_summary
from ttball.train_data import SYNTH_SIZES, Window, WindowStream, labelled_clips, loader, to_device
from ttball.train_profile import StepProfile, format_line, next_batch
from ttball.train_targets import TARGET_SIGMA, draw_target

# Read the losses back every this many steps, not every step: without the wait for the GPU, the
# host queues the next steps while the GPU runs (the eager step is host-bound on the H200:
# docs/benchmarks/LOG.md), so a step costs max(host, GPU) instead of host + GPU.
READ_LOSS_EVERY = 10

__all__ = [
    "SYNTH_SIZES",
    "TARGET_SIGMA",
    "TrainConfig",
    "WindowStream",
    "draw_target",
    "focal_wbce",
    "labelled_clips",
    "make_loaders",
    "train",
]


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (saved beside its checkpoints)."""

    out: str = "runs/train"
    steps: int = 4000
    batch: int = 16
    lr: float = 2e-3
    weight_decay: float = 1e-4
    warmup_steps: int = 200
    crop: tuple[int, int] = (144, 256)  # (h, w) of training crops; multiples of 8
    full_frame_every: int = 4  # every Nth batch uses whole frames (the SE blocks see full images)
    windows_per_clip: int = 48
    synth_seed: int = 1
    synth_frames: int = 120
    clips: tuple[str, ...] = ()  # folders of labelled clips (video + CSV of the same name)
    synth: bool = True
    workers: int = 4
    seed: int = 0
    amp: bool = True
    max_minutes: float = 0.0  # 0: no limit
    checkpoint_every: int = 500
    init: str | None = None  # fine-tune from these weights
    name: str = "ttball-synth"  # the weights' name in their config (reports, /readyz, track.json)
    compile: bool = False  # torch.compile the forward pass (and through it the backward)
    height: int = 288
    width: int = 512
    extra: dict[str, Any] = field(default_factory=dict)


def focal_wbce(logits: Tensor, target: Tensor) -> Tensor:
    """``-(1-p)^2 y log p - p^2 (1-y) log(1-p)``, averaged; computed stably from logits."""
    p = torch.sigmoid(logits)
    log_p = torch.nn.functional.logsigmoid(logits)
    log_not_p = torch.nn.functional.logsigmoid(-logits)
    loss = -((1 - p) ** 2 * target * log_p + p**2 * (1 - target) * log_not_p)
    return loss.mean()


def _lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(cfg.steps - cfg.warmup_steps, 1)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def make_loaders(cfg: TrainConfig) -> tuple[Iterator[Window], Iterator[Window] | None]:
    """Crop batches, and whole-frame batches (a quarter of the batch size and of the workers)."""
    crops = loader(cfg, cfg.crop, cfg.batch, cfg.workers)
    if not cfg.full_frame_every:
        return crops, None
    return crops, loader(cfg, None, max(cfg.batch // 4, 1), (cfg.workers + 3) // 4)


def _state_path(out: Path) -> Path:
    return out / "last.pt"


def _resume(path: Path, model: torch.nn.Module,
            opt: torch.optim.Optimizer) -> tuple[int, list[dict[str, Any]], str | None]:
    """Load ``path`` (``last.pt``) into ``model`` and ``opt``; its (step, history, the weights
    the run was first started from: its ``--init``, None for a state saved before it was kept).
    A file that is not a training state of this network is a one-line error naming it, and
    stays as it is."""
    def fail(why: str) -> CheckpointError:
        return CheckpointError(f"cannot resume from {path}: {why}; move it away or delete it "
                               "to start over")

    if path.is_dir() or path.stat().st_size == 0:
        raise fail("a folder, not a file" if path.is_dir() else "the file is empty")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever torch.load makes of a file not its own
        raise fail(f"not a PyTorch checkpoint ({error_summary(exc)})") from None
    keys = ("model", "optimizer", "step", "history")
    if not (isinstance(state, dict) and all(k in state for k in keys)
            and isinstance(state["model"], dict)):
        raise fail(f"not a ttball training state (expected a dict with {', '.join(keys)})")
    try:
        check_state_dict(state["model"], model.state_dict(), "its model")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        init = state.get("init")
        return int(state["step"]), list(state["history"]), init if isinstance(init, str) else None
    except CheckpointError as exc:
        raise fail(str(exc)) from None
    except (AttributeError, KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise fail(f"not a ttball training state ({error_summary(exc)})") from None


def train(cfg: TrainConfig, device: str = "auto", progress: bool = True,
          profile_every: int = 0) -> dict[str, Any]:
    """Train (or resume from ``cfg.out/last.pt``); returns a summary with the loss curve and
    the time breakdown (``profile``; printed every ``profile_every`` steps when not 0).

    A resumed run goes on with ``cfg``'s settings (steps, lr, data...) from the step it resumed
    at (``resumed_from_step``; ``seconds`` and ``windows`` count from there), and from the
    weights the run was first started from (``init``, kept in ``last.pt``); ``cfg.init`` with a
    ``last.pt`` to resume is a ``UserError``: the saved state would replace the weights.

    A run whose loss or weights stop being finite raises ``UserError`` and saves nothing more.
    """
    from tqdm import tqdm

    from ttball.backends import resolve_device

    out = Path(cfg.out)
    if cfg.init and _state_path(out).is_file():  # resuming would load last.pt over the --init
        raise UserError(f"--out {out} holds a run to resume ({_state_path(out).name}); --init "
                        "starts a new one: choose a new --out or leave out --init")
    dev = resolve_device(device)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    model = load_model(cfg.init) if cfg.init else BlurBall()
    model = model.to(dev).train()
    if dev.type == "cuda":
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        torch.backends.cudnn.benchmark = True
    # fused: one kernel for all 464 tensors instead of a few per tensor (CUDA only)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                            fused=dev.type == "cuda")
    forward = torch.compile(model, dynamic=False) if cfg.compile else model
    history: list[dict[str, Any]] = []
    step = 0
    if _state_path(out).exists():
        step, history, init = _resume(_state_path(out), model, opt)
        cfg = replace(cfg, init=init)  # the run's --init, which a resumed run is not given again
    resumed_from = step  # the settings in cfg apply from this step on
    config = WeightsConfig(name=cfg.name, input_height=cfg.height, input_width=cfg.width)
    crops, fulls = make_loaders(cfg)
    amp = cfg.amp and dev.type == "cuda"
    started, seen, ema = time.perf_counter(), 0, None
    half_warm = (step, started)
    total, recent = StepProfile(), StepProfile()
    pending: list[tuple[int, Tensor]] = []  # losses not yet read back: the GPU may lag behind
    # closed on errors too: a one-line error must not land on the end of the bar's line
    with tqdm(total=cfg.steps, initial=step, disable=not progress, unit="step",
              dynamic_ncols=True) as bar:
        while step < cfg.steps:
            if cfg.max_minutes and time.perf_counter() - started > 60 * cfg.max_minutes:
                break
            t0 = time.perf_counter()
            batch = next(next_batch(fulls, crops, step, cfg.full_frame_every))
            t1 = time.perf_counter()
            pending.append((step + 1, _step(forward, model, opt, batch, config, dev, amp,
                                            _lr_at(step, cfg))))
            t2 = time.perf_counter()
            step += 1
            seen += batch.x.shape[0]
            due = step % cfg.checkpoint_every == 0 or step in (cfg.steps, cfg.warmup_steps)
            if due or step % READ_LOSS_EVERY == 0 or (profile_every and step % profile_every == 0):
                ema = _read_losses(pending, ema, history, cfg)  # waits for the GPU
            for prof in (total, recent):
                prof.add(batch, t1 - t0, t2 - t1, time.perf_counter() - t2)
            if step == cfg.warmup_steps // 2:
                half_warm = (step, time.perf_counter())
            if cfg.max_minutes and step == cfg.warmup_steps:
                cfg = _fit_to_budget(cfg, step, half_warm, time.perf_counter() - started)
                bar.total = cfg.steps
            if profile_every and step % profile_every == 0:
                tqdm.write(f"step {step}: {format_line(recent.summary())}")
                recent = StepProfile()
            elapsed = time.perf_counter() - started
            bar.set_postfix(loss=f"{ema or 0:.4f}", win_s=f"{seen / max(elapsed, 1e-9):.0f}")
            bar.update(1)
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                _checkpoint(out, model, opt, step, history, config, cfg)
        ema = _read_losses(pending, ema, history, cfg)
    _checkpoint(out, model, opt, step, history, config, cfg)
    elapsed = time.perf_counter() - started
    return {"steps": step, "planned_steps": cfg.steps, "resumed_from_step": resumed_from,
            "init": cfg.init,
            "seconds": elapsed, "windows": seen,
            "windows_per_s": seen / max(elapsed, 1e-9), "loss": ema, "history": history,
            "profile": total.summary(), "weights": str(out / "weights.safetensors")}


def _read_losses(pending: list[tuple[int, Tensor]], ema: float | None,
                 history: list[dict[str, Any]], cfg: TrainConfig) -> float | None:
    """Read back the (step, loss) in ``pending`` (one sync for all), fold them into the moving
    average and the history (every 50th step and the last); empties ``pending``."""
    if not pending:
        return ema
    values = torch.stack([loss for _, loss in pending]).tolist()
    for (step, _), value in zip(pending, values):
        if not math.isfinite(value):
            raise _diverged(step, f"the loss is {value}")
        ema = value if ema is None else 0.98 * ema + 0.02 * value
        if step % 50 == 0 or step == cfg.steps:
            history.append({"step": step, "loss": round(ema, 6), "lr": _lr_at(step, cfg)})
    pending.clear()
    return ema


def _step(forward: Callable[[Tensor], dict[int, Tensor]], model: torch.nn.Module,
          opt: torch.optim.Optimizer, batch: Window, config: WeightsConfig, dev: torch.device,
          amp: bool, lr: float) -> Tensor:
    """One optimiser step on ``batch`` through ``forward`` (``model`` or its compiled
    version); returns the loss (not yet read back from the device)."""
    x, y = to_device(batch, config, dev)
    if dev.type == "cuda":
        x = x.contiguous(memory_format=torch.channels_last)
    for group in opt.param_groups:
        group["lr"] = lr
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
        logits = forward(x)[0]
    loss = focal_wbce(logits.float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    return loss.detach()


def _fit_to_budget(
    cfg: TrainConfig, step: int, half_warm: tuple[int, float], elapsed: float
) -> TrainConfig:
    """After warm-up, cut ``steps`` to what fits in ``max_minutes`` at the rate seen so far.

    The cosine schedule then runs over the final step count, so ``--steps N`` with the N this
    picks reproduces the run's schedule exactly (the warm-up does not depend on ``steps``).
    """
    # The rate over the second half of warm-up: the first steps wait for data workers to start.
    rate = (step - half_warm[0]) / max(time.perf_counter() - half_warm[1], 1e-9)
    fits = step + int(0.97 * rate * (60 * cfg.max_minutes - elapsed))
    return replace(cfg, steps=max(step, min(cfg.steps, fits)))


def _diverged(step: int, why: str) -> UserError:
    return UserError(f"training diverged at step {step} ({why}); its weights were not saved "
                     "(those saved before are kept): try a lower --lr")


def _checkpoint(out: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int,
                history: list[dict[str, Any]], config: WeightsConfig, cfg: TrainConfig) -> None:
    """Save the weights and the state to resume from, unless the weights are no longer finite:
    those would replace the run's (or an earlier run's) good weights with garbage."""
    weights = [t for t in model.state_dict().values() if t.is_floating_point()]
    if not bool(torch.stack([torch.isfinite(t).all() for t in weights]).all()):
        raise _diverged(step, "the weights are no longer finite numbers")
    model.eval()
    save_checkpoint(out / "weights.safetensors", model,
                    config.evolve(source=f"ttball train, {step} steps", metrics={"train": asdict(cfg)}))
    model.train()
    tmp = _state_path(out).with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                "history": history, "init": cfg.init}, tmp)
    os.replace(tmp, _state_path(out))

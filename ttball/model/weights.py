"""Checkpoints: the published ``torch.save`` format, bare state dicts and safetensors.

Published checkpoints are dicts whose ``model_state_dict`` holds the weights (possibly with a
``module.`` prefix from DataParallel). ttball saves safetensors, with its
:class:`~ttball.model.config.WeightsConfig` as JSON in the file's metadata. Every load checks the
tensors against the network and names whatever is missing, unexpected or mis-shaped.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ttball.errors import CheckpointError
from ttball.model.blurball import BlurBall, check_input_size
from ttball.model.config import RANDOM_INIT, WeightsConfig
from ttball.results import file_mode

CONFIG_KEY = "ttball.config"
DEFAULT_WEIGHTS = Path(__file__).resolve().parent.parent / "data" / "blurball_ttball.safetensors"
_LIST_LIMIT = 6


def default_weights_path() -> Path | None:
    """The default checkpoint: ``$TTBALL_WEIGHTS`` if set, else the one shipped in the package."""
    env = os.environ.get("TTBALL_WEIGHTS")
    if env:
        return Path(env)
    return DEFAULT_WEIGHTS if DEFAULT_WEIGHTS.exists() else None


def state_dict_sha256(state: dict[str, Tensor]) -> str:
    """A hash of names, shapes and values, independent of file format and tensor device."""
    h = hashlib.sha256()
    for key in sorted(state):
        t = state[key].detach().to("cpu").contiguous()
        h.update(key.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.float().numpy().tobytes())
    return h.hexdigest()


def _read(path: Path) -> tuple[dict[str, Any], WeightsConfig | None]:
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.is_dir():
        raise CheckpointError(f"checkpoint is a directory, not a file: {path}")
    if path.suffix == ".safetensors" or _looks_like_safetensors(path):
        return _read_safetensors(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to unpickle an untrusted file
        # (UnpicklingError, struct.error, EOFError, RuntimeError, ...) means "not a checkpoint".
        raise CheckpointError(
            f"cannot read checkpoint {path}: not a .safetensors file or a PyTorch state dict "
            f"({error_summary(exc)})") from None
    return _unwrap(obj, path), None


def _looks_like_safetensors(path: Path) -> bool:
    """Whether ``path`` starts as a safetensors file does (an 8-byte little-endian header size,
    then the JSON header): ``save_checkpoint`` writes that format under any name, ``.pth``
    included, which ``torch.load`` then could not read."""
    try:
        with path.open("rb") as f:
            head = f.read(9)
        size = path.stat().st_size
    except OSError:
        return False
    return len(head) == 9 and head[8:] == b"{" and 8 + int.from_bytes(head[:8], "little") <= size


def error_summary(exc: BaseException) -> str:
    """``exc``'s kind and the start of its first line, for a one-line error about a file
    ``torch.load`` refused: torch's messages run to hundreds of characters, may hold terminal
    colour codes and advise ``weights_only=False`` (never, for a file from elsewhere)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    first = text.splitlines()[0].split(". ")[0][:120] if text else ""
    return type(exc).__name__ + (f": {first}" if first else "")


def _read_safetensors(path: Path) -> tuple[dict[str, Any], WeightsConfig | None]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (not a dict)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read safetensors file {path}: {exc}") from None
    try:
        config = WeightsConfig.from_json(meta[CONFIG_KEY]) if CONFIG_KEY in meta else None
    except (AttributeError, TypeError, ValueError) as exc:  # ValueError: JSON's too
        raise CheckpointError(f"{path}: its {CONFIG_KEY!r} metadata is not a ttball weights "
                              f"configuration ({error_summary(exc)})") from None
    if config is not None:
        try:
            check_input_size(*config.input_size)
        except ValueError as exc:  # every window would fail in the network
            raise CheckpointError(f"{path}: its configuration's {exc}") from None
    return state, config


def _unwrap(obj: Any, path: Path) -> dict[str, Any]:
    if isinstance(obj, dict) and "model_state_dict" in obj:
        obj = obj["model_state_dict"]
    elif isinstance(obj, dict) and "state_dict" in obj:
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not obj:
        raise CheckpointError(
            f"{path} holds no state dict (expected a dict of tensors or one under "
            "'model_state_dict')"
        )
    not_tensors = [k for k, v in obj.items() if not isinstance(v, Tensor)]
    if not_tensors:
        raise CheckpointError(
            f"{path}: entries that are not tensors: {_short(not_tensors)} "
            "(expected a state dict or a dict with 'model_state_dict')"
        )
    return obj


def _strip_prefix(state: dict[str, Tensor]) -> dict[str, Tensor]:
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}
    return state


def _short(names: list[str]) -> str:
    shown = ", ".join(names[:_LIST_LIMIT])
    more = len(names) - _LIST_LIMIT
    return shown + (f" and {more} more" if more > 0 else "")


def check_state_dict(state: dict[str, Tensor], reference: dict[str, Tensor], source: str) -> None:
    """Raise :class:`CheckpointError` naming every missing, unexpected or mis-shaped tensor."""
    missing = [k for k in reference if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in reference]
    misshaped = [
        f"{k} {tuple(state[k].shape)} != {tuple(reference[k].shape)}"
        for k in reference
        if k in state and state[k].shape != reference[k].shape
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing ({_short(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected ({_short(unexpected)})")
    if misshaped:
        problems.append(f"{len(misshaped)} mis-shaped ({_short(misshaped)})")
    if problems:
        raise CheckpointError(f"{source} does not match BlurBall: " + "; ".join(problems))


def load_checkpoint(path: str | os.PathLike[str]) -> tuple[dict[str, Tensor], WeightsConfig]:
    """Read and check a checkpoint. Returns (state dict, its config)."""
    path = Path(path)
    raw, config = _read(path)
    state = _strip_prefix(raw)
    reference = BlurBall().state_dict()
    check_state_dict(state, reference, str(path))
    # a checkpoint saved from a run that diverged: every frame would come out "not visible"
    broken = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if broken:
        raise CheckpointError(f"{path}: {len(broken)} tensors hold NaN or infinite values "
                              f"({_short(broken)}); was it saved from a run that diverged?")
    for key, ref in reference.items():  # bare dicts may omit BN counters; they carry no weight
        state.setdefault(key, ref.clone())
    state = {k: state[k] for k in reference}
    sha = state_dict_sha256(state)
    if config is None:
        config = WeightsConfig(name=path.stem, source=str(path))
    return state, config.evolve(sha256=sha)


def save_checkpoint(
    path: str | os.PathLike[str], model: torch.nn.Module, config: WeightsConfig | None = None
) -> WeightsConfig:
    """Save ``model``'s weights as safetensors with ``config`` in the metadata (written atomically)."""
    from safetensors.torch import save_file

    path = Path(path)
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    config = (config or getattr(model, "config", None) or RANDOM_INIT).evolve(
        sha256=state_dict_sha256(state)
    )
    check_input_size(*config.input_size)  # a file load_model would refuse
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        save_file(state, str(tmp), metadata={CONFIG_KEY: config.to_json()})
        os.chmod(tmp, file_mode(path))  # (safetensors makes its file 0600)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CheckpointError(f"cannot write checkpoint {path}: {exc.strerror or exc}") from None
    return config


def load_model(
    path: str | os.PathLike[str] | None = None,
    device: str | torch.device = "cpu",
) -> BlurBall:
    """The network in eval mode with weights from ``path`` (or the default weights).

    Without a path and without default weights the network keeps its random initialisation and
    ``model.config.name`` is ``"random-init"``: callers must say so to the user. ``device`` as
    ``create``'s (``auto``, ``cpu``, ``cuda``...; a ``UserError`` if this machine lacks it).
    """
    from ttball.backends.base import resolve_device

    dev = resolve_device(device)  # before minutes of loading: "cuda" without a GPU failed last
    model = BlurBall()
    if path is None:
        path = default_weights_path()
    if path is None:
        model.config = RANDOM_INIT.evolve(sha256=state_dict_sha256(model.state_dict()))
    else:
        state, config = load_checkpoint(path)
        model.load_state_dict(state, strict=True)
        model.config = config
    return model.eval().to(dev)

"""ONNX Runtime's own format (``.ort``): the exported network for phones.

ONNX Runtime Mobile, the runtime of Android and iOS apps (``onnxruntime-android``,
``onnxruntime-objc``, ``onnxruntime-c``), loads ``.ort`` files: the graph already optimised
(fused convolutions, constant folding), so the app's runtime needs no optimiser, and a custom
minimal build can hold only the operators the file uses, listed in the
``required_operators.config`` written beside it (ONNX Runtime's ``build.py --minimal_build
--include_ops_by_config``). The ONNX file's ``metadata_props`` (size, mean/std, threshold, layout:
:func:`~ttball.export.onnx.read_metadata`) are kept.

The conversion is the one ``python -m onnxruntime.tools.convert_onnx_models_to_ort`` makes in
its fixed style: every graph optimisation of the CPU provider except the x86-only NCHWc layout
(kept for ``amd64``), and for ``arm`` QDQ nodes fused to int8 x int8 kernels (the ARM kernels'
type; x86 fuses only uint8 activations). For NNAPI or Core ML, whose providers take plain ONNX
operators, convert the ``.onnx`` file with that tool's runtime style instead.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ttball.errors import UserError

PLATFORMS = ("arm", "amd64")
OPERATORS_SUFFIX = ".required_operators.config"


@dataclass(frozen=True)
class OrtExport:
    """What :func:`convert_to_ort` wrote, and how far its run is from the ONNX file's.

    ``max_abs_diff``: max |.ort − .onnx| of the logits of one seeded random window, both run by
    this machine's ONNX Runtime CPU provider (the ``.ort`` file as a phone runs it, with no
    further optimisation).
    """

    path: Path
    operators: Path
    platform: str
    operator_count: int
    max_abs_diff: float


def operators_path(path: str | os.PathLike[str]) -> Path:
    """``model.ort`` → ``model.required_operators.config`` (beside it)."""
    path = Path(path)
    return path.with_name(path.stem + OPERATORS_SUFFIX)


def convert_to_ort(onnx_path: str | os.PathLike[str], path: str | os.PathLike[str], *,
                   platform: str = "arm", check: np.ndarray | None = None) -> OrtExport:
    """Convert the ONNX file ``onnx_path`` to ``path`` (``.ort``) for ``platform`` and write its
    operator list beside it (:func:`operators_path`); each appears whole or not at all.

    ``check``: the window the two files are compared on (default: a seeded random one of the
    ONNX file's input shape, batch 1).
    """
    import onnxruntime as ort
    from onnxruntime.tools.ort_format_model import create_config_from_models

    if platform not in PLATFORMS:
        raise UserError(f"unknown platform {platform!r}; use one of {', '.join(PLATFORMS)}")
    path, operators = Path(path), operators_path(path)
    for target in (path, operators):  # both checked first: the pair is replaced together
        if target.is_dir():
            raise UserError(f"{target} is a folder; cannot write the export in its place")
    with tempfile.TemporaryDirectory(prefix=".ttball-ort-", dir=path.parent) as tmp:
        staged = Path(tmp) / "model.ort"
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = str(staged)
        so.add_session_config_entry("session.save_model_format", "ORT")
        so.add_session_config_entry("session.qdqisint8allowed", "1" if platform == "arm" else "0")
        so.log_severity_level = 3
        disabled = None if platform == "amd64" else ["NchwcTransformer"]
        ort.InferenceSession(str(onnx_path), sess_options=so, providers=["CPUExecutionProvider"],
                             disabled_optimizers=disabled)
        staged_ops = Path(tmp) / "ops.config"
        quiet = logging.getLogger("ort_format_model.utils")  # its INFO line names the temp file
        level, quiet.level = quiet.level, logging.WARNING
        try:
            create_config_from_models([staged], staged_ops, False)
        finally:
            quiet.setLevel(level)
        text = "".join(f"# - {path.name}\n" if line.startswith("# - ") else line
                       for line in staged_ops.read_text().splitlines(keepends=True))
        staged_ops.write_text(text)
        diff = _compare(onnx_path, staged, check)
        os.chmod(staged, 0o644)
        os.chmod(staged_ops, 0o644)
        os.replace(staged, path)
        os.replace(staged_ops, operators)
    count = sum(len(line.split(";")[2].split(",")) for line in text.splitlines()
                if line and not line.startswith("#"))
    return OrtExport(path, operators, platform, count, diff)


def ort_file_session(path: str | os.PathLike[str], options: Any = None) -> Any:
    """An ONNX Runtime CPU session of the ``.ort`` file at ``path`` as ONNX Runtime Mobile runs
    it: the saved graph, no optimisation at load (``options``' level is overridden)."""
    import onnxruntime as ort

    so = options or ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("session.load_model_format", "ORT")
    return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])


def _compare(onnx_path: str | os.PathLike[str], ort_path: Path,
             window: np.ndarray | None) -> float:
    from ttball.export.onnx import ort_run, ort_session, random_window

    reference = ort_session(onnx_path)
    if window is None:
        shape = reference.get_inputs()[0].shape
        height, width = (d if isinstance(d, int) else 1 for d in shape[2:])
        window = random_window(height, width)
    got = ort_run(ort_file_session(ort_path), window)
    return float(np.abs(got - ort_run(reference, window)).max())

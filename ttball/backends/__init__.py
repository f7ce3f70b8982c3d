"""Ways to run the network, behind one registry (see :mod:`ttball.backends.base`).

Importing this package registers every backend module listed here.
"""

# Order of import = order of `names()` (and of bench rows): the reference first.
from ttball.backends import eager  # noqa: F401, I001  (registers)
from ttball.backends import folded  # noqa: F401
from ttball.backends import compiled  # noqa: F401
from ttball.backends import cudagraph  # noqa: F401
from ttball.backends import tensorrt  # noqa: F401
from ttball.backends import onnxrt  # noqa: F401
from ttball.backends import openvino  # noqa: F401
from ttball.backends import triton  # noqa: F401
from ttball.backends import null  # noqa: F401  (diagnostic: see its docstring)

# ONNX Runtime backends (`onnxrt-*`) live in ttball/backends/onnxrt.py (another issue); the lead
from ttball.backends.base import (
    Backend,
    BackendBase,
    config_of,
    create,
    describe,
    names,
    register,
    resolve_device,
    unavailable_reason,
)

__all__ = [
    "Backend",
    "BackendBase",
    "config_of",
    "create",
    "describe",
    "names",
    "register",
    "resolve_device",
    "unavailable_reason",
]

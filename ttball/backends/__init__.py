"""Ways to run the network, behind one registry (see :mod:`ttball.backends.base`).

Importing this package registers every backend module listed here.
"""

from ttball.backends import eager  # noqa: F401  (registers)
# ONNX Runtime backends (`onnxrt-*`) live in ttball/backends/onnxrt.py (another issue); the lead
# adds `onnxrt` to the import above when it lands. Order of import = order of `names()`.
from ttball.backends.base import (
    Backend,
    BackendBase,
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
    "create",
    "describe",
    "names",
    "register",
    "resolve_device",
    "unavailable_reason",
]

"""scripts/gpu_conv_tiles.py's tile argument (the script itself needs a GPU)."""

from __future__ import annotations

import pytest
from script_env import load_script

gpu_conv_tiles = load_script("gpu_conv_tiles")


def test_tiles_are_rows_by_columns_with_optional_warpgroups_and_variant() -> None:
    assert gpu_conv_tiles.parse_tile("16x16") == ((16, 16), 1, "")
    assert gpu_conv_tiles.parse_tile("3x64x3") == ((3, 64), 3, "")
    assert gpu_conv_tiles.parse_tile("16x64x2t") == ((16, 64), 2, "t")
    assert gpu_conv_tiles.parse_tile("16x64x1r") == ((16, 64), 1, "r")
    for bad in ("16", "1x2x3x4", "16x16t", "16x16r"):
        with pytest.raises(ValueError, match="ROWSxCOLS"):
            gpu_conv_tiles.parse_tile(bad)

"""scripts/sass_loops.py: a kernel's SASS split by function, its loops (backward branches)
counted with their notable instructions."""

from __future__ import annotations

import shutil

import pytest
from script_env import ROOT, load_script

SASS = """
        Function : _Z6kernelv
        .headerflags    @"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;              /* 0x00000a00ff017b82 */
        /*0010*/                   LDGSTS.E.128 [R13], desc[UR20][R8.64], P0 ;
        /*0020*/              @!PT LDS RZ, [RZ] ;
        /*0030*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0040*/              @!P0 BRA 0x10 ;
        /*0050*/                   HGMMA.64x144x16.F32 R96, gdesc[UR8], RZ, !UPT ;
        /*0060*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0070*/               @P1 BRA 0x0 ;
        /*0080*/                   EXIT ;
        Function : _Z5otherv
        /*0000*/                   EXIT ;
"""


def test_loops_are_backward_branches_with_their_length_and_notable_instructions() -> None:
    sass_loops = load_script("sass_loops")
    found = sass_loops.functions(SASS)
    assert list(found) == ["_Z6kernelv", "_Z5otherv"]
    total, loops = sass_loops.summarize(found["_Z6kernelv"])
    assert total == 9
    assert [(start, end, n) for start, end, n, _ in loops] == [(0x10, 0x40, 4), (0x0, 0x70, 8)]
    assert loops[0][3] == {"LDGSTS": 1, "LDS": 1}
    assert loops[1][3] == {"LDGSTS": 1, "LDS": 1, "HGMMA": 1, "BAR": 1}
    assert sass_loops.summarize(found["_Z5otherv"]) == (1, [])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_the_tap_partials_kernel_has_its_halo_and_sums_loops(capsys, monkeypatch) -> None:
    """On the real source: the cp.async 6 x 30 kernel's halo loop (one LDGSTS) and sums loop
    (nine 16-byte shared loads, one global store) inside its tile loop (16 HGMMA)."""
    sass_loops = load_script("sass_loops")
    monkeypatch.setattr("sys.argv", ["sass_loops.py", "--kernel", "Li6ELi30ELi2ELb0",
                                     "--source", str(ROOT / "ttball/kernels/direct.cu")])
    sass_loops.main()
    out = capsys.readouterr().out
    assert "conv3x3_wgmma_taps_kernel" in out
    loops = [line for line in out.splitlines() if line.strip().startswith("loop")]
    assert any("LDGSTS 1" in line and "HGMMA" not in line for line in loops)  # the halo's
    assert any("LDS 9, STG 1)" in line for line in loops)  # the sums'
    assert any("HGMMA 16" in line for line in loops)  # the tile's

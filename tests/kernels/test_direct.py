"""The CUDA direct 3×3 convolution (ttball.kernels.direct): which steps it takes, that its
source compiles for sm_90 wherever nvcc is found, and, on a GPU, that it equals the
convolution and leaves the backend's logits as triton-fp16 has them."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn.functional as F
from kernel_env import CUDA, DEVICE, graph_replay_rel, require_triton

from ttball.errors import UserError
from ttball.kernels import Conv, build_plan
from ttball.kernels.buffers import pair_steps
from ttball.kernels.configs import Config, pair_waits
from ttball.kernels.direct import (
    INPUT_KERNELS,
    INPUT_KERNELS_TMA,
    KERNEL_SOURCE,
    KERNELS,
    PAIRS,
    WGMMA,
    WGMMA_RS,
    WGMMA_TAPS,
    WGMMA_TAPS_TMA,
    WGMMA_TMA,
    build_library,
    candidate_id,
    conv3x3_direct,
    conv3x3_direct_input,
    conv3x3_pair,
    direct_applies,
    direct_missing,
    direct_tiles,
)
from ttball.kernels.plan import INPUT

CASES = [(cin, cout, tile) for (cin, cout), tiles in KERNELS.items() for tile in tiles]
PAIR_CASES = [(c, tile) for c, tiles in PAIRS.items() for tile in tiles]
INPUT_CASES = [(c, cout, tile) for (c, cout), tiles in INPUT_KERNELS.items() for tile in tiles]
INPUT_TMA_CASES = [(c, cout, tile) for (c, cout), tiles in INPUT_KERNELS_TMA.items()
                   for tile in tiles]
INPUT_TMA_IDS = [candidate_id(c, cout, *tile, 1, tma=True) for c, cout, tile in INPUT_TMA_CASES]
WGMMA_CASES = [(cin, cout, tile) for (cin, cout), tiles in WGMMA.items() for tile in tiles]
WGMMA_IDS = [candidate_id(cin, cout, *tile) for cin, cout, tile in WGMMA_CASES]
TMA_CASES = [(cin, cout, tile) for (cin, cout), tiles in WGMMA_TMA.items() for tile in tiles]
TMA_IDS = [candidate_id(cin, cout, *tile, tma=True) for cin, cout, tile in TMA_CASES]
RS_CASES = [(cin, cout, tile) for (cin, cout), tiles in WGMMA_RS.items() for tile in tiles]
RS_IDS = [f"{candidate_id(cin, cout, *tile)}-rs" for cin, cout, tile in RS_CASES]
TAPS_CASES = [(cin, cout, tile) for (cin, cout), tiles in WGMMA_TAPS.items() for tile in tiles]
TAPS_IDS = [candidate_id(cin, cout, *tile, taps=True) for cin, cout, tile in TAPS_CASES]
TAPS_TMA_CASES = [(cin, cout, tile) for (cin, cout), tiles in WGMMA_TAPS_TMA.items()
                  for tile in tiles]
TAPS_TMA_IDS = [candidate_id(cin, cout, *tile, tma=True, taps=True)
                for cin, cout, tile in TAPS_TMA_CASES]
from ttball.model import BlurBall, randomize_batchnorm


@pytest.fixture(scope="module")
def model() -> BlurBall:
    return randomize_batchnorm(BlurBall(), seed=0).eval()


def test_it_takes_the_small_channel_3x3_steps_transition1_and_64_channels(model: BlurBall) -> None:
    plan = build_plan(model)
    taken = [s for s in plan.steps if isinstance(s, Conv) and direct_applies(s)]
    # conv1 and conv2 of the 12 BasicBlocks at full (16 ch) and half resolution (32 ch),
    # layer1's 32 -> 32, transition1's 128 -> 16, the stem's first convolution from the
    # input (9 -> 64); and 64 -> 64 (the stem's second convolution, the third level's four
    # BasicBlocks), which only the wgmma kernel takes
    assert len(taken) == 27 + 9
    assert {(s.terms[0].cin, s.cout) for s in taken} == {(16, 16), (32, 32), (128, 16), (9, 64),
                                                         (64, 64)}
    assert sum(1 for s in taken if s.se_sum) == 12 + 4
    assert sum(1 for s in taken if s.relu) == 15 + 5
    assert [s.terms[0].src for s in taken if s.terms[0].cin == 9] == ["input"]
    for step in plan.steps:
        if isinstance(step, Conv) and step not in taken:
            t = step.terms[0]
            assert (len(step.terms) > 1 or step.addends or t.ksize != 3 or t.stride != 1
                    or (t.cin, step.cout) not in KERNELS and (t.cin, step.cout) not in WGMMA)


def test_it_pairs_the_two_convolutions_of_every_basic_block(model: BlurBall) -> None:
    """The 12 BasicBlocks at full (16 channels) and half resolution (32): conv1 (ReLU) and
    conv2 (SE sums), conv1's output read by conv2 alone."""
    plan = build_plan(model)
    pairs = pair_steps(plan)
    assert len(pairs) == 12
    for i in pairs:
        first, second = plan.steps[i], plan.steps[i + 1]
        assert first.relu and not first.se_sum and second.se_sum and not second.relu
        assert second.terms[0].src == first.out
        assert first.cout in PAIRS and sum(first.out in (t.src for t in s.terms)
                                           for s in plan.steps) == 1


def test_a_pair_step_also_waits_for_what_its_second_step_waits_for() -> None:
    plain = Config(64, 4, 3)
    pair, skip = Config(32, 8, 2, direct=8, pair=1), Config(32, 8, 2, direct=8, pair=2)
    waits = [[], [0], [1], [0, 2], [3]]
    assert pair_waits(waits, [plain] * 5) == waits
    assert pair_waits(waits, [plain, plain, pair, skip, plain]) == [[], [0], [0, 1], [0, 2], [3]]
    assert pair.short() == "m32w8s2d8+next" and skip.short() == "m32w8s2d8=prev"


def _compiled() -> set[tuple[int, int, int, int]]:
    """(Cin, Cout, TH, TW) of every kernel the CUDA dispatch instantiates."""
    macro = re.findall(r"TTBALL_TILE\(CIN, COUT, (\d+), (\d+)\)", KERNEL_SOURCE)
    pairs = re.findall(r"TTBALL_TILES\((\d+), (\d+)\)", KERNEL_SOURCE)
    single = re.findall(r"TTBALL_TILE\((\d+), (\d+), (\d+), (\d+)\)", KERNEL_SOURCE)
    out = {(int(c), int(o), int(h), int(w)) for c, o in pairs for h, w in macro}
    return out | {tuple(int(v) for v in t) for t in single}


def _compiled_wgmma() -> set[tuple[int, int, int, int, int]]:
    """(Cin, Cout, TH, TW, WG) of the wgmma kernels the dispatch instantiates (TW 64; 128 for
    the 64 -> 64 kernel with the pixels as N)."""
    tiles = re.findall(r"TTBALL_WGMMA_TILE\(CIN, COUT, (\d+), (\d+)\)", KERNEL_SOURCE)
    shapes = re.findall(r"TTBALL_WGMMA\((\d+), (\d+)\)", KERNEL_SOURCE)
    single = re.findall(r"TTBALL_WGMMA_TILE\((\d+), (\d+), (\d+), (\d+)\)", KERNEL_SOURCE)
    n128 = re.findall(r"TTBALL_WGMMA_N128_TILE\((\d+), (\d+), (\d+)\)", KERNEL_SOURCE)
    return ({(int(c), int(o), int(h), 64, int(g)) for c, o in shapes for h, g in tiles}
            | {(int(c), int(o), int(h), 64, int(g)) for c, o, h, g in single}
            | {(int(c), 64, int(h), 128, int(g)) for c, h, g in n128})


def _compiled_rs() -> set[tuple[int, int, int, int, int]]:
    """(Cin, Cout, TH, 64, WG) of the wgmma kernels instantiated with A from registers."""
    found = re.findall(r"TTBALL_WGMMA_RS_TILE\((\d+), (\d+), (\d+), (\d+)\)", KERNEL_SOURCE)
    return {(int(c), int(o), int(h), 64, int(g)) for c, o, h, g in found}


def _compiled_tma() -> set[tuple[int, int, int, int, int]]:
    """(Cin, Cout, TH, TW, WG) of the wgmma kernels instantiated with the TMA halo (TW 64; 128
    for the 64 -> 64 kernel with the pixels as N)."""
    found = re.findall(r"TTBALL_WGMMA_TMA_TILE\((\d+), (\d+), (\d+), (\d+)\)", KERNEL_SOURCE)
    n128 = re.findall(r"TTBALL_WGMMA_N128_TMA_TILE\((\d+), (\d+), (\d+)\)", KERNEL_SOURCE)
    return ({(int(c), int(o), int(h), 64, int(g)) for c, o, h, g in found}
            | {(int(c), 64, int(h), 128, int(g)) for c, h, g in n128})


def _compiled_taps(tma: bool = False) -> set[tuple[int, int, int, int, int]]:
    """(Cin, Cout, TH, TW, WG) of the tap-partials kernels the dispatch instantiates (``tma``:
    those with the TMA halo)."""
    macro = "TTBALL_WGMMA_TAPS_TMA_TILE" if tma else "TTBALL_WGMMA_TAPS_TILE"
    found = re.findall(macro + r"\((\d+), (\d+), (\d+), (\d+), (\d+)\)", KERNEL_SOURCE)
    return {tuple(int(v) for v in t) for t in found}


def _compiled_input(tma: bool = False) -> set[tuple[int, int, int, int]]:
    """(input channels, Cout, TH, TW) of the input kernels the dispatch instantiates (``tma``:
    those with the TMA staging)."""
    macro = "TTBALL_INPUT_TMA_TILE" if tma else "TTBALL_INPUT_TILE"
    found = re.findall(macro + r"\((\d+), (\d+), (\d+), (\d+)\)", KERNEL_SOURCE)
    return {tuple(int(v) for v in t) for t in found}


def test_the_tuner_offers_only_compiled_tiles() -> None:
    assert _compiled_input() == {(c, cout, *tile) for c, cout, tile in INPUT_CASES}
    assert _compiled_input(tma=True) == {(c, cout, *tile) for c, cout, tile in INPUT_TMA_CASES}
    assert _compiled_taps() == {(cin, cout, *tile) for cin, cout, tile in TAPS_CASES}
    assert _compiled_taps(tma=True) == {(cin, cout, *tile) for cin, cout, tile in TAPS_TMA_CASES}
    assert _compiled_tma() == {(cin, cout, *tile) for cin, cout, tile in TMA_CASES}
    assert _compiled_rs() == {(cin, cout, *tile) for cin, cout, tile in RS_CASES}
    assert _compiled_tma() <= _compiled_wgmma()  # each also without TMA
    compiled = _compiled()
    assert compiled == {(cin, cout, *tile) for cin, cout, tile in CASES}
    assert _compiled_wgmma() == {(cin, cout, *tile) for cin, cout, tile in WGMMA_CASES}
    for (cin, cout) in KERNELS:
        for pixels in (144 * 256, 288 * 512, 64 * 288 * 512):
            assert {(cin, cout, *t) for t in direct_tiles(pixels, cin, cout)} <= compiled


def test_the_tuner_offers_the_tap_partials_kernel_unless_told_not_to(
        model: BlurBall, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unless $TTBALL_WGMMA_TAPS=0, and for transition1 only: its three tiles (6 x 30, 6 x 14,
    14 x 14), each with the cp.async and the TMA halo, in both schedules."""
    from ttball.kernels.configs import direct_configs

    big = 64 * 288 * 512
    steps = [s for s in build_plan(model).steps if isinstance(s, Conv) and direct_applies(s)]
    tiles = ["m30w8s1TAPSd6", "m30w8s2TAPSd6", "m14w4s1TAPSd6", "m14w4s2TAPSd6",
             "m30w8s1TMATAPSd6", "m30w8s2TMATAPSd6", "m14w4s1TMATAPSd6", "m14w4s2TMATAPSd6",
             "m14w8s1TAPSd14", "m14w8s2TAPSd14", "m14w8s1TMATAPSd14", "m14w8s2TMATAPSd14"]
    for value, nxt, want in (("", "", tiles), ("0", "", []), ("1", "", tiles),
                             ("", "1", tiles), ("0", "1", [])):
        monkeypatch.setenv("TTBALL_WGMMA_TAPS", value)
        monkeypatch.setenv("TTBALL_DIRECT_NEXT", nxt)
        taps = [(s.out, c) for s in steps for c in direct_configs(s, big, wgmma=True) if c.taps]
        assert sorted((out, c.short()) for out, c in taps) == sorted(("x6", w) for w in want)


def test_candidates_whose_gpu_tests_have_not_run_are_withheld_unless_asked(
        model: BlurBall, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each tile of UNTESTED is compiled and only offered with $TTBALL_DIRECT_NEXT=1 or by
    name (the tuner checks speed, not results). UNTESTED is empty since its twelve passed on
    an H200: the mechanism is checked with three compiled tiles put there."""
    from ttball.kernels import direct
    from ttball.kernels.configs import direct_configs
    from ttball.kernels.direct import UNTESTED

    big = 64 * 288 * 512
    steps = [s for s in build_plan(model).steps if isinstance(s, Conv) and direct_applies(s)]

    def offered_keys() -> set[tuple]:
        return {(s.terms[0].cin, s.cout, c.direct, c.block_m, c.num_warps // 4, c.tma, c.taps)
                for s in steps for c in direct_configs(s, big, wgmma=True)}

    compiled_tma = _compiled_tma()
    for cin, cout, rows, cols, groups, tma, taps in UNTESTED:  # each one is compiled
        if (cin, cout) in INPUT_KERNELS:  # the input kernel's (one warpgroup of 4 warps)
            assert groups == 1 and (cin, cout, rows, cols) in _compiled_input(tma)
            continue
        assert (cin, cout, rows, cols, groups) in (
            _compiled_taps(tma) if taps else compiled_tma if tma else _compiled_wgmma())
    pretend = frozenset({(128, 16, 6, 14, 1, False, True), (64, 64, 4, 64, 2, True, False),
                         (9, 64, 8, 16, 1, True, False)})
    monkeypatch.delenv("TTBALL_DIRECT_NEXT", raising=False)
    assert pretend <= offered_keys()  # tested: offered
    monkeypatch.setattr(direct, "UNTESTED", pretend)
    assert not offered_keys() & pretend
    monkeypatch.setenv("TTBALL_DIRECT_NEXT", "1")
    assert pretend <= offered_keys()
    # those whose GPU tests passed, by their tests' ids; the others still withheld
    chosen = sorted(pretend)[:2]
    monkeypatch.setenv("TTBALL_DIRECT_NEXT", ", ".join(candidate_id(*key) for key in chosen))
    assert offered_keys() & pretend == set(chosen)
    monkeypatch.setenv("TTBALL_DIRECT_NEXT", "128-16-6x30-wg2-taps,16-16-99x64-wg1")
    with pytest.raises(UserError, match="16-16-99x64-wg1 not among the untested candidates"):
        offered_keys()


def test_the_candidates_tests_are_named_as_the_untested_candidates() -> None:
    """So that the GPU call can offer exactly those whose tests passed
    (``$TTBALL_DIRECT_NEXT`` as a list of these ids)."""
    from ttball.kernels.direct import UNTESTED

    ids = set(WGMMA_IDS) | set(TMA_IDS) | set(TAPS_IDS) | set(TAPS_TMA_IDS) | set(INPUT_TMA_IDS)
    assert {candidate_id(*key) for key in UNTESTED} <= ids
    assert candidate_id(128, 16, 6, 14, 1, tma=True, taps=True) == "128-16-6x14-wg1-taps-tma"


def test_the_tuner_offers_both_schedules_of_each_tile(
        model: BlurBall, monkeypatch: pytest.MonkeyPatch) -> None:
    """And the wgmma kernel's tiles only when asked (on an H100 or H200), for its shapes, on
    steps of at least WGMMA_MIN_PIXELS output pixels (full resolution at batch 64, not the
    third level at batch 1)."""
    from ttball.kernels.configs import direct_configs
    from ttball.kernels.direct import WGMMA_MIN_PIXELS

    monkeypatch.setenv("TTBALL_WGMMA_TAPS", "1")
    monkeypatch.setenv("TTBALL_DIRECT_NEXT", "1")

    big, small = 64 * 288 * 512, 72 * 128
    assert small < WGMMA_MIN_PIXELS <= big
    for step in build_plan(model).steps:
        if isinstance(step, Conv) and direct_applies(step):
            shape = (step.terms[0].cin, step.cout)
            for pixels in (small, big):
                tiles = direct_tiles(pixels, *shape)
                configs = direct_configs(step, pixels)
                assert {(c.direct, c.block_m, c.num_stages) for c in configs} == {
                    (rows, cols, stages) for rows, cols in tiles for stages in (1, 2)}
                wgmma = direct_configs(step, pixels, wgmma=True)
                extra = ([] if step.terms[0].src == INPUT or pixels == small
                         else [(rows, cols, 4 * groups)
                               for rows, cols, groups in WGMMA.get(shape, ())])
                assert {(c.direct, c.block_m, c.num_warps, c.num_stages)
                        for c in wgmma if not (c.rs or c.taps)} == {
                    (rows, cols, warps, stages)
                    for rows, cols, warps in [(r, c, 8) for r, c in tiles] + extra
                    + [(r, c, 4) for r, c in INPUT_KERNELS_TMA.get(shape, ())
                       if step.terms[0].src == INPUT]  # the input's TMA staging
                    for stages in (1, 2)}
                if pixels == big:
                    assert bool(extra) == (shape in ((16, 16), (32, 32), (64, 64)))
                # the TMA halo: only the tiles of WGMMA_TMA, where the wgmma tiles are offered;
                # the input kernel's TMA staging on its step at every size
                tma = ([] if not extra else [(rows, cols, 4 * groups)
                                             for rows, cols, groups in WGMMA_TMA.get(shape, ())])
                tma += ([(rows, cols, 4) for rows, cols in INPUT_KERNELS_TMA.get(shape, ())]
                        if step.terms[0].src == INPUT else [])
                assert {(c.direct, c.block_m, c.num_warps, c.num_stages)
                        for c in wgmma if c.tma and not c.taps} == {
                    (rows, cols, warps, stages) for rows, cols, warps in tma for stages in (1, 2)}
                assert all(not c.tma for c in configs)
                # A from registers: only the tiles of WGMMA_RS, where the wgmma tiles are offered
                rs = ([] if not extra else [(rows, cols, 4 * groups)
                                            for rows, cols, groups in WGMMA_RS.get(shape, ())])
                assert {(c.direct, c.block_m, c.num_warps, c.num_stages)
                        for c in wgmma if c.rs} == {
                    (rows, cols, warps, stages) for rows, cols, warps in rs for stages in (1, 2)}
                assert all(not c.rs for c in configs)
                # the tap partials: the tiles of WGMMA_TAPS from WGMMA_MIN_PIXELS, without SE
                # sums (transition1's 128 -> 16)
                taps = ([] if step.terms[0].src == INPUT or pixels == small or step.se_sum
                        else [(rows, cols, 4 * groups, False)
                              for rows, cols, groups in WGMMA_TAPS.get(shape, ())]
                        + [(rows, cols, 4 * groups, True)
                           for rows, cols, groups in WGMMA_TAPS_TMA.get(shape, ())])
                assert {(c.direct, c.block_m, c.num_warps, c.tma, c.num_stages)
                        for c in wgmma if c.taps} == {
                    (rows, cols, warps, tma, stages)
                    for rows, cols, warps, tma in taps for stages in (1, 2)}
                assert all(not c.taps for c in configs)
                if pixels == big:
                    assert bool(taps) == (shape == (128, 16))
            # the third level at batch 64: 64 -> 64 always (WGMMA_MIN_PIXELS_OF), the other
            # shapes from WGMMA_MIN_PIXELS
            quarter = direct_configs(step, 64 * 72 * 128, wgmma=True)
            assert any(c.block_m == 64 for c in quarter) == (
                shape == (64, 64) or (shape in WGMMA and 64 * 72 * 128 >= WGMMA_MIN_PIXELS))


def test_it_is_unavailable_without_a_gpu_and_says_why() -> None:
    assert "CUDA" in (direct_missing(torch.device("cpu")) or "")


_WALK_MAIN = r"""
#include <cstdio>
#include <vector>
#define __host__
#define __device__
#define __forceinline__ inline
%s
// every (pixel, chunk) of a ROWS x HALO_W halo exactly once, at row p / HALO_W, column
// p %% HALO_W, chunk tid %% CH
template <int ROWS, int HALO_W, int CH, int T>
int check() {
  std::vector<int> seen(ROWS * HALO_W * CH, 0);
  int bad = 0;
  for (int tid = 0; tid < T; ++tid)
    halo_chunks<ROWS, HALO_W, CH, T>(tid, [&](int p, int row, int col, int v) {
      if (p < 0 || p >= ROWS * HALO_W || row != p / HALO_W || col != p %% HALO_W || v != tid %% CH)
        ++bad;
      else
        ++seen[p * CH + v];
    });
  for (int c : seen) bad += c != 1;
  return bad;
}
int main() {
  // the kernels' halos: wgmma 8 and 16 rows at 32 and 16 channels, one or two warpgroups;
  // 128 -> 16 (16 x 16 and 8 x 32 tiles); the pair kernel (2-pixel border); odd small ones;
  // wgmma 64 -> 64 at 4 and 2 rows (one warpgroup), 4 (two) and 6 (three); with 128-pixel
  // rows at 2 rows (one or two warpgroups) and 1
  int bad = check<10, 66, 4, 256>() + check<10, 66, 4, 128>() + check<18, 66, 2, 256>() +
            check<6, 66, 2, 128>() + check<18, 18, 16, 256>() + check<10, 34, 16, 256>() +
            check<12, 36, 2, 256>() + check<12, 68, 4, 256>() + check<3, 5, 8, 8>() +
            check<1, 1, 2, 256>() + check<6, 66, 8, 128>() + check<4, 66, 8, 128>() +
            check<6, 66, 8, 256>() + check<8, 66, 8, 384>() + check<4, 130, 8, 128>() +
            check<4, 130, 8, 256>() + check<3, 130, 8, 128>();
  printf("%%d\n", bad);
  return bad != 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine")
def test_halo_chunks_walks_every_chunk_of_the_halo_once(tmp_path) -> None:
    """The halo copies' index walk (``halo_chunks`` in direct.cu, host and device code), taken
    out of the kernel source and run on the host for each halo shape the kernels copy."""
    walk = re.search(r"template <int ROWS, int HALO_W, int CH, int T, typename F>\n.*?\n}\n",
                     KERNEL_SOURCE, re.DOTALL)
    assert walk is not None
    (tmp_path / "walk.cpp").write_text(_WALK_MAIN % walk.group(0))
    subprocess.run(["g++", "-std=c++17", "-O1", str(tmp_path / "walk.cpp"), "-o",
                    str(tmp_path / "walk")], check=True, capture_output=True, timeout=120)
    done = subprocess.run([str(tmp_path / "walk")], check=False, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stdout


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_kernel_source_compiles_for_sm90_without_spills(tmp_path) -> None:
    """What can be checked without a GPU: the CUDA source compiles for the H200 (sm_90), every
    (channels, tile) kernel is instantiated, and none spills registers to local memory."""
    src = tmp_path / "direct.cu"
    src.write_text(KERNEL_SOURCE)
    done = subprocess.run(
        ["nvcc", "-c", "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a",
         "-Xptxas", "-v", str(src), "-o", str(tmp_path / "direct.o")],
        check=False, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # the wgmma kernels, each with its wgmma instructions not serialized by ptxas
    wgmma = re.findall(r"Function properties for (\S*conv3x3_wgmma_(?:n128_|rs_)?kernel\S*)",
                       done.stderr)
    assert len(set(wgmma)) == len(WGMMA_CASES) + len(TMA_CASES) + len(RS_CASES)
    taps = re.findall(r"Function properties for (\S*conv3x3_wgmma_taps_kernel\S*)", done.stderr)
    assert len(set(taps)) == len(TAPS_CASES) + len(TAPS_TMA_CASES)
    assert "serialized" not in done.stderr
    kernels = re.findall(r"Function properties for (\S*conv3x3_direct_kernel\S*)", done.stderr)
    assert len(set(kernels)) == len(CASES)
    inputs = re.findall(r"Function properties for (\S*conv3x3_input_kernel\S*)", done.stderr)
    assert len(set(inputs)) == len(INPUT_CASES)
    staged = re.findall(r"Function properties for (\S*conv3x3_input_tma_kernel\S*)", done.stderr)
    assert len(set(staged)) == len(INPUT_TMA_CASES)
    pairs = re.findall(r"Function properties for (\S*conv3x3_pair_kernel\S*)", done.stderr)
    assert len(set(pairs)) == len(PAIR_CASES)
    spills = re.findall(r"(\d+) bytes spill stores", done.stderr)
    assert len(spills) == (len(CASES) + len(INPUT_CASES) + len(INPUT_TMA_CASES)
                           + len(PAIR_CASES) + len(WGMMA_CASES)
                           + len(TMA_CASES) + len(RS_CASES) + len(TAPS_CASES)
                           + len(TAPS_TMA_CASES))
    assert all(int(n) == 0 for n in spills)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_the_library_builds_with_nvcc_alone_once_and_exports_its_entry_points(tmp_path) -> None:
    lib = build_library(tmp_path, "90", shutil.which("nvcc"))
    stamp = lib.stat().st_mtime_ns
    loaded = ctypes.CDLL(str(lib))  # the CUDA runtime resolves (rpath) without a GPU
    assert loaded.ttball_conv3x3_direct and loaded.ttball_conv3x3_pair
    assert loaded.ttball_conv3x3_direct_input
    assert build_library(tmp_path, "90", shutil.which("nvcc")) == lib  # reused, not rebuilt
    assert lib.stat().st_mtime_ns == stamp
    # no temporary file left; the build's lock stays (removing it would race a waiter)
    assert sorted(p.name for p in tmp_path.iterdir()) == [lib.with_suffix(".lock").name, lib.name]


def test_a_failing_compiler_says_why_and_leaves_nothing_behind(tmp_path) -> None:
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\necho 'direct.cu(1): error: something is wrong' >&2\nexit 2\n")
    nvcc.chmod(0o755)
    out = tmp_path / "kernels"
    with pytest.raises(RuntimeError, match=r"nvcc exited with 2: .*something is wrong"):
        build_library(out, "90", str(nvcc))
    assert [p.suffix for p in out.iterdir()] == [".lock"]  # no library, no temporary file


def test_processes_building_the_library_at_once_run_nvcc_once(tmp_path) -> None:
    """Eight replicas started together each ran nvcc: now the first builds while the others
    wait for its lock, then take its library (threads here: their locks exclude each other
    as processes' do)."""
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    runs = tmp_path / "runs"
    nvcc.write_text(f'#!/bin/sh\necho run >> "{runs}"\nsleep 0.3\n'
                    'while [ "$1" != -o ]; do shift; done\necho lib > "$2"\n')
    nvcc.chmod(0o755)
    with ThreadPoolExecutor(4) as pool:
        libs = list(pool.map(lambda _: build_library(tmp_path / "kernels", "90", str(nvcc)),
                             range(4)))
    assert len(set(libs)) == 1 and libs[0].read_text() == "lib\n"
    assert runs.read_text() == "run\n"


def test_an_nvcc_without_split_compile_builds_without_it(tmp_path) -> None:
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in --split-compile*) '
                    'echo "nvcc fatal : Unknown option \'--split-compile=0\'" >&2; exit 1;; '
                    'esac; done\nwhile [ "$1" != -o ]; do shift; done\necho lib > "$2"\n')
    nvcc.chmod(0o755)
    lib = build_library(tmp_path / "kernels", "90", str(nvcc))
    assert lib.read_text() == "lib\n"


def test_tensors_off_cuda_or_of_the_wrong_kind_are_refused_before_any_build() -> None:
    x = torch.zeros(1, 4, 16, 16, dtype=torch.float16)
    w = torch.zeros(9 * 16 * 16, dtype=torch.float16)
    bias = torch.zeros(16)
    with pytest.raises(ValueError, match="CUDA tensor"):
        conv3x3_direct(torch.empty_like(x), x, w, bias, None, (8, 16), relu=True)
    with pytest.raises(ValueError, match="same batch, height and width"):
        conv3x3_direct(torch.empty(1, 4, 8, 16, dtype=torch.float16), x, w, bias, None, (8, 16),
                       relu=True)
    with pytest.raises(ValueError, match="CUDA tensor"):
        conv3x3_direct_input(torch.empty(1, 16, 16, 64, dtype=torch.float16),
                             torch.zeros(1, 9, 16, 16), w, bias, (8, 16), relu=True)
    with pytest.raises(ValueError, match="same batch, height and width"):
        conv3x3_direct_input(torch.empty(1, 16, 16, 64, dtype=torch.float16),
                             torch.zeros(1, 9, 16, 32), w, bias, (8, 16), relu=True)
    with pytest.raises(ValueError, match="tma: only for the wgmma kernels' tiles"):
        conv3x3_direct(torch.empty_like(x), x, w, bias, None, (8, 16), relu=True, tma=True)
    with pytest.raises(ValueError, match="not for the wgmma kernel"):
        conv3x3_direct(torch.empty_like(x), x, w, bias, None, (4, 64), relu=True, skip_mma=True)
    with pytest.raises(ValueError, match="warpgroups=2: 1, or 2 or 3 for the wgmma kernels"):
        conv3x3_direct(torch.empty_like(x), x, w, bias, None, (8, 16), relu=True, warpgroups=2)
    with pytest.raises(ValueError, match="warpgroups=4"):
        conv3x3_direct(torch.empty_like(x), x, w, bias, None, (4, 64), relu=True, warpgroups=4)
    # the tap-partials kernel: its shapes only (4 channels here), never with SE sums
    with pytest.raises(ValueError, match="taps: only for the shapes of WGMMA_TAPS"):
        conv3x3_direct(torch.empty_like(x), x, w, bias, None, (6, 30), relu=True,
                       warpgroups=2, taps=True)
    x128 = torch.zeros(1, 4, 16, 128, dtype=torch.float16)
    out16 = torch.zeros(1, 4, 16, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="without rs or se_sum"):
        conv3x3_direct(out16, x128, w, bias, torch.zeros(1, 16), (6, 30), relu=True,
                       warpgroups=2, taps=True)
    with pytest.raises(ValueError, match="CUDA tensor"):  # the shape is right: to the tensors
        conv3x3_direct(out16, x128, w, bias, None, (6, 30), relu=True, warpgroups=2, taps=True)
    with pytest.raises(ValueError, match="one shape"):
        conv3x3_pair(torch.empty(1, 4, 16, 32, dtype=torch.float16), x, w, bias, w, bias, None,
                     (8, 32), relu=True)


def _reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, relu: bool):
    """(NHWC out, per-(batch, channel) sums before the ReLU), in float32."""
    y = F.conv2d(x.float().permute(0, 3, 1, 2), weight, bias, padding=1)
    sums = y.sum(dim=(2, 3))
    y = torch.relu(y) if relu else y
    return y.permute(0, 2, 3, 1), sums


def require_wgmma() -> None:
    """Skip unless the direct kernels' library and its wgmma kernels can run here."""
    from ttball.kernels.direct import wgmma_available

    if direct_missing(DEVICE) or not wgmma_available(DEVICE):
        pytest.skip(direct_missing(DEVICE) or "the wgmma kernel needs compute capability 9.0")


def _check_direct_conv(cin: int, cout: int, tile: tuple[int, int], height: int, width: int,
                       sums_atol: float, warpgroups: int = 1, tma: bool = False,
                       rs: bool = False, taps: bool = False) -> None:
    """conv3x3_direct with ``tile`` on a (2, height, width, cin) batch against the float32
    convolution: ReLU or not, SE sums (not with ``taps``), one block per tile and a
    persistent grid of 3 blocks (each computing several tiles of both images while it copies
    the next one's halo)."""
    from ttball.kernels.conv import pack_weight

    g = torch.Generator().manual_seed(cin * 100 + cout + tile[0])
    x = torch.randn(2, height, width, cin, generator=g).half().to(DEVICE)
    weight = (torch.randn(cout, cin, 3, 3, generator=g) / (3 * cin ** 0.5)).to(DEVICE)
    bias = torch.randn(cout, generator=g).to(DEVICE)
    for relu, pipelined in ((False, False), (True, False), (False, True), (True, True)):
        out = torch.full((2, height, width, cout), float("nan"), dtype=torch.half, device=DEVICE)
        sums = None if taps else torch.zeros(2, cout, device=DEVICE)
        conv3x3_direct(out, x, pack_weight(weight.cpu(), DEVICE), bias, sums, tile, relu,
                       pipelined=pipelined, max_blocks=3, warpgroups=warpgroups, tma=tma,
                       rs=rs, taps=taps)
        want, want_sums = _reference(x, weight.half().float(), bias, relu)
        torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=1e-2)
        if sums is not None:
            torch.testing.assert_close(sums, want_sums, atol=sums_atol, rtol=1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cin,cout,tile", CASES)
def test_direct_conv_equals_the_convolution(cin: int, cout: int, tile: tuple[int, int]) -> None:
    """Odd sizes (partial tiles at the right and bottom edges), ReLU and SE sums, one block
    per tile and pipelined."""
    if direct_missing(DEVICE):
        pytest.skip(direct_missing(DEVICE))
    _check_direct_conv(cin, cout, tile, 18, 40, sums_atol=0.5)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cin,cout,tile", WGMMA_CASES, ids=WGMMA_IDS)
def test_wgmma_conv_equals_the_convolution(cin: int, cout: int,
                                           tile: tuple[int, int, int]) -> None:
    """The wgmma kernel (H100/H200 only), as above: odd sizes (partial tiles at the right and
    bottom, three tiles a row of 64 pixels), one or two warpgroups a block."""
    require_wgmma()
    rows, cols, groups = tile
    _check_direct_conv(cin, cout, (rows, cols), 19, 150, sums_atol=1.0, warpgroups=groups)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cin,cout,tile", TMA_CASES, ids=TMA_IDS)
def test_wgmma_conv_with_the_tma_halo_equals_the_convolution(
        cin: int, cout: int, tile: tuple[int, int, int]) -> None:
    """The same with the halo copied by TMA: the tensor map's zero fill is the padding at
    all four edges (partial tiles right and bottom, negative box coordinates top and left),
    the mbarrier phases alternate over many tiles a block (persistent grid of 3)."""
    require_wgmma()
    rows, cols, groups = tile
    _check_direct_conv(cin, cout, (rows, cols), 19, 150, sums_atol=1.0, warpgroups=groups,
                       tma=True)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cin,cout,tile", RS_CASES, ids=RS_IDS)
def test_wgmma_conv_with_a_from_registers_equals_the_convolution(
        cin: int, cout: int, tile: tuple[int, int, int]) -> None:
    """The same with A from registers: each warpgroup's consecutive rows (19 rows: partial
    tiles at the bottom, so some warpgroups' rows are all outside the image), each halo row's
    fragments used by up to three output rows, rows stored as they complete."""
    require_wgmma()
    rows, cols, groups = tile
    _check_direct_conv(cin, cout, (rows, cols), 19, 150, sums_atol=1.0, warpgroups=groups,
                       rs=True)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cin,cout,tile,tma",
                         [(*case, False) for case in TAPS_CASES]
                         + [(*case, True) for case in TAPS_TMA_CASES],
                         ids=TAPS_IDS + TAPS_TMA_IDS)
def test_wgmma_taps_conv_equals_the_convolution(cin: int, cout: int,
                                                tile: tuple[int, int, int], tma: bool) -> None:
    """The tap-partials kernel: 19 x 97 pixels (partial tiles at the right and bottom edges,
    the padding at all four: the TMA halo's zero fill too), ReLU or not, one block per tile
    and a persistent grid of 3 (the next tile's halo copied while the partials are summed,
    into the one buffer: with TMA, its barrier's phases alternating over the tiles)."""
    require_wgmma()
    rows, cols, groups = tile
    _check_direct_conv(cin, cout, (rows, cols), 19, 97, sums_atol=0.0, warpgroups=groups,
                       tma=tma, taps=True)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cin,cout,tile", INPUT_CASES)
def test_input_kernel_equals_the_convolution_of_the_fp32_batch(cin: int, cout: int,
                                                               tile: tuple[int, int]) -> None:
    """The stem's first convolution read from the FP32 NCHW batch: odd sizes (partial tiles),
    ReLU or not, one block per tile and a persistent grid of 3 blocks."""
    from ttball.kernels.conv import pack_weight

    if direct_missing(DEVICE):
        pytest.skip(direct_missing(DEVICE))
    g = torch.Generator().manual_seed(cin + tile[1])
    x = torch.randn(2, cin, 19, 45, generator=g).to(DEVICE)
    weight = (torch.randn(cout, cin, 3, 3, generator=g) / (3 * cin ** 0.5)).to(DEVICE)
    bias = torch.randn(cout, generator=g).to(DEVICE)
    for relu, pipelined in ((False, False), (True, False), (True, True), (False, True)):
        out = torch.full((2, 19, 45, cout), float("nan"), dtype=torch.half, device=DEVICE)
        conv3x3_direct_input(out, x, pack_weight(weight.cpu(), DEVICE), bias, tile, relu,
                             pipelined=pipelined, max_blocks=3)
        want, _ = _reference(x.half().permute(0, 2, 3, 1), weight.half().float(), bias, relu)
        torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cin,cout,tile", INPUT_TMA_CASES, ids=INPUT_TMA_IDS)
def test_input_kernel_with_its_tma_staging_equals_the_convolution(cin: int, cout: int,
                                                                  tile: tuple[int, int]) -> None:
    """The same with each tile's input staged by TMA (H100/H200): 19 x 44 pixels (partial
    tiles right and bottom; the tensor map's zero fill is the padding at all four edges, and the
    box's columns before and past the halo, there for its 16-byte alignment, are ignored), one block per tile and a persistent grid of 3
    (the next tile's box copied into the other stage while this one computes: each stage's
    barrier phase alternating over several tiles a block); then a width that is not a
    multiple of 4 refused."""
    from ttball.kernels.conv import pack_weight

    require_wgmma()
    g = torch.Generator().manual_seed(cin + tile[1] + 1)
    x = torch.randn(3, cin, 19, 44, generator=g).to(DEVICE)
    weight = (torch.randn(cout, cin, 3, 3, generator=g) / (3 * cin ** 0.5)).to(DEVICE)
    bias = torch.randn(cout, generator=g).to(DEVICE)
    packed = pack_weight(weight.cpu(), DEVICE)
    for relu, pipelined in ((False, False), (True, False), (True, True), (False, True)):
        out = torch.full((3, 19, 44, cout), float("nan"), dtype=torch.half, device=DEVICE)
        conv3x3_direct_input(out, x, packed, bias, tile, relu, pipelined=pipelined,
                             max_blocks=3, tma=True)
        want, _ = _reference(x.half().permute(0, 2, 3, 1), weight.half().float(), bias, relu)
        torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=1e-2)
        plain = torch.empty_like(out)
        conv3x3_direct_input(plain, x, packed, bias, tile, relu, pipelined=pipelined,
                             max_blocks=3)
        torch.testing.assert_close(out, plain, atol=0, rtol=0)  # the same values, converted alike
    odd = torch.zeros(1, cin, 16, 42, device=DEVICE)
    with pytest.raises(ValueError, match="width 42 is not a multiple of 4"):
        conv3x3_direct_input(torch.empty(1, 16, 42, cout, dtype=torch.half, device=DEVICE), odd,
                             packed, bias, tile, True, tma=True)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("c,tile", PAIR_CASES)
def test_pair_kernel_equals_the_two_convolutions(c: int, tile: tuple[int, int]) -> None:
    """conv2(relu(conv1(x) + b1), FP16) + b2 with SE sums, odd sizes (partial tiles), one
    block per tile and pipelined with 3 blocks."""
    from ttball.kernels.conv import pack_weight
    from ttball.kernels.direct import conv3x3_pair

    if direct_missing(DEVICE):
        pytest.skip(direct_missing(DEVICE))
    g = torch.Generator().manual_seed(c + tile[1])
    x = torch.randn(2, 19, 75, c, generator=g).half().to(DEVICE)
    w1, w2 = ((torch.randn(c, c, 3, 3, generator=g) / (3 * c ** 0.5)).to(DEVICE) for _ in "12")
    b1, b2 = (torch.randn(c, generator=g).to(DEVICE) for _ in "12")
    mid, _ = _reference(x, w1.half().float(), b1, relu=True)
    want, want_sums = _reference(mid.half(), w2.half().float(), b2, relu=False)
    for pipelined in (False, True):
        out = torch.full_like(x, float("nan"))
        sums = torch.zeros(2, c, device=DEVICE)
        conv3x3_pair(out, x, pack_weight(w1.cpu(), DEVICE), b1, pack_weight(w2.cpu(), DEVICE),
                     b2, sums, tile, relu=False, pipelined=pipelined, max_blocks=3)
        torch.testing.assert_close(out.float(), want, atol=3e-2, rtol=1e-2)
        torch.testing.assert_close(sums, want_sums, atol=1.0, rtol=2e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_pair_kernel_in_the_backend_replays_the_same_logits(model: BlurBall) -> None:
    """triton-fp16-direct with all 12 residual blocks forced onto the pair kernel, on the
    branches' streams and through graph capture and replay, against triton-fp16."""
    from ttball.backends import create

    require_triton()
    if direct_missing(DEVICE):
        pytest.skip(direct_missing(DEVICE))
    x = torch.randn(2, 9, 72, 128, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    plain = create("triton-fp16", model, DEVICE, tune=False)
    for forced in (Config(32, 8, 1, direct=8, pair=1), Config(32, 8, 2, direct=8, pair=1)):
        direct = create("triton-fp16-direct", model, DEVICE, tune=False)
        direct.executor.forced_pair = forced
        rel = graph_replay_rel(direct, plain, x)
        assert rel < 1e-3, f"{forced.short()}: relative difference {rel:.1e}"
        chosen = [cfg for _, cfg in direct.executor.chosen(tuple(x.shape))]
        assert sum(cfg.pair == 1 for cfg in chosen) == 12
        assert sum(cfg.pair == 2 for cfg in chosen) == 12


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_direct_backend_replays_the_same_logits_as_triton(model: BlurBall) -> None:
    """triton-fp16-direct against triton-fp16, every applicable step forced onto the direct
    kernel (not left to the tuner), graph capture and replay included."""
    from ttball.backends import create
    from ttball.kernels.configs import Config

    require_triton()
    if direct_missing(DEVICE):
        pytest.skip(direct_missing(DEVICE))
    x = torch.randn(2, 9, 72, 128, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    plain = create("triton-fp16", model, DEVICE, tune=False)
    for forced in (Config(16, 8, 1, direct=8), Config(16, 8, 2, direct=8)):  # pipelined: s2
        direct = create("triton-fp16-direct", model, DEVICE, tune=False)
        for launch in direct.executor.launches:
            step = launch.step
            # (not 64 -> 64: the wgmma kernel's alone, tested below)
            if (isinstance(step, Conv) and direct_applies(step)
                    and (step.terms[0].cin, step.cout) in {**KERNELS, **INPUT_KERNELS}):
                launch.configs = lambda bufs, cfg=forced: [cfg]  # the tuner's only candidate
        rel = graph_replay_rel(direct, plain, x)
        assert rel < 1e-3, f"{forced.short()}: relative difference {rel:.1e}"
        chosen = direct.executor.chosen(tuple(x.shape))
        assert sum(1 for _, cfg in chosen if cfg == forced) == 27


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_wgmma_kernel_in_the_backend_replays_the_same_logits(model: BlurBall) -> None:
    """triton-fp16-direct with every step the wgmma kernel takes forced onto it (both
    schedules), through graph capture and replay, against triton-fp16."""
    require_triton()
    require_wgmma()
    # each shape's first wgmma tile one block a tile, then its second one persistent; then
    # its third and second last (for 64 -> 64 the 128-pixel tiles with the pixels as N).
    # 12 BasicBlocks' two convolutions and layer1's 32 -> 32; 64 -> 64: the stem's second
    # convolution and the third level's two BasicBlocks in each of two stages
    _replay_with_tiles_forced(model, 3, WGMMA, ((0, 1), (1, 2), (-3, 2), (-2, 1)), rs=False,
                              steps=25 + 9)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_wgmma_kernel_with_a_from_registers_in_the_backend_replays_the_same_logits(
        model: BlurBall) -> None:
    """triton-fp16-direct with every 16 -> 16 and 32 -> 32 step forced onto the wgmma kernel
    with A from registers (its first tile one block a tile, then its second persistent),
    through graph capture and replay, against triton-fp16."""
    require_triton()
    require_wgmma()
    # 12 BasicBlocks' two convolutions and layer1's 32 -> 32
    _replay_with_tiles_forced(model, 4, WGMMA_RS, ((0, 1), (1, 2)), rs=True, steps=25)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_wgmma_taps_kernel_in_the_backend_replays_the_same_logits(model: BlurBall) -> None:
    """triton-fp16-direct with transition1's 128 -> 16 forced onto each of the tap-partials
    kernel's tiles, cp.async and TMA halo (one block a tile, then persistent), through graph
    capture and replay, against triton-fp16."""
    require_triton()
    require_wgmma()
    every = ((0, 1), (0, 2), (1, 1), (1, 2), (2, 2))  # each tile; 6 x 30 and 6 x 14 both ways
    _replay_with_tiles_forced(model, 5, WGMMA_TAPS, every, rs=False, steps=1, taps=True)
    _replay_with_tiles_forced(model, 5, WGMMA_TAPS_TMA, every, rs=False, steps=1, taps=True,
                              tma=True)


def _replay_with_tiles_forced(model: BlurBall, seed: int,
                              table: dict[tuple[int, int], tuple[tuple[int, int, int], ...]],
                              passes: tuple[tuple[int, int], ...], rs: bool, steps: int,
                              taps: bool = False, tma: bool = False) -> None:
    """triton-fp16-direct against triton-fp16 through graph capture and replay, once per
    (pick, stages) of ``passes``: every step whose channels ``table`` has (not the input's)
    forced onto that shape's tile ``table[shape][pick]`` (``rs``: with A from registers;
    ``taps``: the tap-partials kernel, ``tma`` its TMA halo); ``steps`` of them."""
    from ttball.backends import create

    x = torch.randn(2, 9, 72, 128, generator=torch.Generator().manual_seed(seed)).to(DEVICE)
    plain = create("triton-fp16", model, DEVICE, tune=False)
    for pick, stages in passes:
        direct = create("triton-fp16-direct", model, DEVICE, tune=False)
        taken = 0
        for launch in direct.executor.launches:
            step = launch.step
            shape = (step.terms[0].cin, step.cout) if isinstance(step, Conv) else None
            if shape in table and direct_applies(step) and step.terms[0].src != INPUT:
                rows, cols, groups = table[shape][pick]
                forced = Config(cols, 4 * groups, stages, direct=rows, rs=rs, taps=taps, tma=tma)
                launch.configs = lambda bufs, cfg=forced: [cfg]
                taken += 1
        assert taken == steps
        rel = graph_replay_rel(direct, plain, x)
        assert rel < 1e-3, f"tile {pick}, stages {stages}: relative difference {rel:.1e}"

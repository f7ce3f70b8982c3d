"""The index arithmetic of the CUDA direct kernels (ttball.kernels.direct), transcribed into
numpy and checked without a GPU: the XOR swizzle of the halo, mid and weight rows in shared
memory, the addresses each lane gives to ``ldmatrix``, the ``mma.sync.m16n8k16`` fragment
layouts (PTX ISA, "Matrix fragments for mma.m16n8k16") and the epilogue's pixel and channel
of every accumulator. The kernels themselves run against the convolution on a GPU
(test_direct.py); this catches a wrong index before a GPU is at hand, and shows that every
ldmatrix phase is free of bank conflicts."""

from __future__ import annotations

import numpy as np
import pytest


def swizzle(chunks: int, row: int) -> int:
    if chunks >= 8:
        return row & 7
    return {4: (row >> 1) & 3, 2: (row >> 2) & 1}.get(chunks, 0)


def ldmatrix_x4(mem: np.ndarray, addrs: list[int], trans: bool = False) -> list[list[np.ndarray]]:
    """regs[lane][i]: the pair of matrix i that lane holds; lane 8 i + r addresses row r of
    matrix i (8 halfs)."""
    regs: list[list[np.ndarray]] = [[] for _ in range(32)]
    for i in range(4):
        m = np.stack([mem[addrs[8 * i + r]: addrs[8 * i + r] + 8] for r in range(8)])
        m = m.T if trans else m
        for lane in range(32):
            regs[lane].append(m[lane // 4, 2 * (lane % 4): 2 * (lane % 4) + 2])
    return regs


def conflict_ways(addrs: list[int]) -> int:
    """The most 16-byte rows of one 8-row phase that share a bank group (1: conflict-free)."""
    worst = 1
    for i in range(4):
        units = [(2 * addrs[8 * i + r] // 16) % 8 for r in range(8)]
        worst = max(worst, max(units.count(u) for u in units))
    return worst


def mma(acc: np.ndarray, a: list[list[np.ndarray]], b0: list, b1: list) -> None:
    """acc[lane] (4 floats) += A (16 x 16) @ B (16 x 8) from the lanes' fragments."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, q = lane // 4, 2 * (lane % 4)
        A[g, q:q + 2], A[g + 8, q:q + 2] = a[lane][0], a[lane][1]
        A[g, q + 8:q + 10], A[g + 8, q + 8:q + 10] = a[lane][2], a[lane][3]
        B[q:q + 2, g], B[q + 8:q + 10, g] = b0[lane], b1[lane]
    D = A @ B
    for lane in range(32):
        g, q = lane // 4, 2 * (lane % 4)
        acc[lane] += [D[g, q], D[g, q + 1], D[g + 8, q], D[g + 8, q + 1]]


def operand(lane: int) -> tuple[int, int]:
    return (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4


def conv_segments(src, src_w, cin, cout, base, wsm, ways):
    """conv_segments: the accumulators (2 segments, cout / 8 blocks, 32 lanes, 4)."""
    acc = np.zeros((2, cout // 8, 32, 4))
    for tap in range(9):
        dh, dw = divmod(tap, 3)
        for k in range(cin // 16):
            a = []
            for p in range(2):
                addrs = []
                for lane in range(32):
                    row, half = operand(lane)
                    sp = base[p] + dh * src_w + dw + row
                    addrs.append(sp * cin + ((2 * k + half) ^ swizzle(cin // 8, sp)) * 8)
                ways.append(conflict_ways(addrs))
                a.append(ldmatrix_x4(src, addrs))
            for n2 in range(cout // 16):
                addrs = []
                for lane in range(32):
                    row, half = operand(lane)
                    r = tap * cin + k * 16 + row
                    addrs.append(r * cout + ((2 * n2 + half) ^ swizzle(cout // 8, r)) * 8)
                ways.append(conflict_ways(addrs))
                bf = ldmatrix_x4(wsm, addrs, trans=True)
                for p in range(2):
                    mma(acc[p, 2 * n2], a[p], [f[0] for f in bf], [f[1] for f in bf])
                    mma(acc[p, 2 * n2 + 1], a[p], [f[2] for f in bf], [f[3] for f in bf])
    return acc


def weights_smem(w: np.ndarray) -> np.ndarray:
    cout, cin = w.shape[:2]
    rows = w.transpose(2, 3, 1, 0).reshape(9 * cin, cout)  # pack_weight's rows
    out = np.zeros(9 * cin * cout)
    for r in range(9 * cin):
        for v in range(cout // 8):
            o = r * cout + (v ^ swizzle(cout // 8, r)) * 8
            out[o:o + 8] = rows[r, 8 * v:8 * v + 8]
    return out


def halo_smem(x: np.ndarray, h0: int, w0: int, rows: int, cols: int, pad: int) -> np.ndarray:
    H, W, cin = x.shape
    out = np.zeros(rows * cols * cin)
    for p in range(rows * cols):
        hh, ww = h0 - pad + p // cols, w0 - pad + p % cols
        if 0 <= hh < H and 0 <= ww < W:
            for v in range(cin // 8):
                o = p * cin + (v ^ swizzle(cin // 8, p)) * 8
                out[o:o + 8] = x[hh, ww, 8 * v:8 * v + 8]
    return out


def store(out, acc, bias, ho, wo0):
    """store_segment without ReLU and SE: pixels g and g + 8, channels n * 8 + 2q, + 1."""
    H, W, _ = out.shape
    for n in range(acc.shape[0]):
        for lane in range(32):
            g, q = lane // 4, 2 * (lane % 4)
            for h8 in range(2):
                wo = wo0 + g + 8 * h8
                if ho < H and wo < W:
                    c = n * 8 + q
                    out[ho, wo, c:c + 2] = acc[n, lane, 2 * h8:2 * h8 + 2] + bias[c:c + 2]


def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    H, W, _ = x.shape
    xp = np.pad(x, ((1, 1), (1, 1), (0, 0)))
    return sum(xp[dh:dh + H, dw:dw + W] @ w[:, :, dh, dw].T
               for dh in range(3) for dw in range(3)) + b


@pytest.mark.parametrize("cin,cout,th,tw",
                         [(16, 16, 4, 32), (32, 32, 8, 16), (128, 16, 8, 16)])
def test_direct_kernel_indexing_equals_the_convolution(cin, cout, th, tw) -> None:
    rng = np.random.default_rng(cin + cout)
    H, W = th + 3, tw + 5  # partial tiles at the bottom and right
    x, w, b = rng.standard_normal((H, W, cin)), rng.standard_normal((cout, cin, 3, 3)), rng.standard_normal(cout)
    wsm, ways = weights_smem(w), []
    out = np.full((H, W, cout), np.nan)
    tasks, segs = th * tw // 16, tw // 16
    for h0 in range(0, H, th):
        for w0 in range(0, W, tw):
            halo = halo_smem(x, h0, w0, th + 2, tw + 2, 1)
            for warp in range(tasks // 2):  # one pair of segments per warp
                seg = [2 * warp, 2 * warp + 1]
                base = [(t // segs) * (tw + 2) + (t % segs) * 16 for t in seg]
                acc = conv_segments(halo, tw + 2, cin, cout, base, wsm, ways)
                for p, t in enumerate(seg):
                    store(out, acc[p], b, h0 + t // segs, w0 + (t % segs) * 16)
    np.testing.assert_allclose(out, conv(x, w, b), atol=1e-9)
    assert max(ways) == 1


@pytest.mark.parametrize("c,th,tw", [(16, 8, 32), (32, 8, 16)])
def test_pair_kernel_indexing_equals_the_two_convolutions(c, th, tw) -> None:
    rng = np.random.default_rng(c)
    H, W = th + 3, tw + 5
    x = rng.standard_normal((H, W, c))
    w1, w2 = (rng.standard_normal((c, c, 3, 3)) / 10 for _ in "12")
    b1, b2 = rng.standard_normal(c), rng.standard_normal(c)
    wsm1, wsm2, ways = weights_smem(w1), weights_smem(w2), []
    in_w, mid_w = tw + 4, tw + 2
    segs1, segs2 = (mid_w + 15) // 16, tw // 16
    tasks1 = (th + 2) * segs1
    out = np.full((H, W, c), np.nan)
    for h0 in range(0, H, th):
        for w0 in range(0, W, tw):
            halo = halo_smem(x, h0, w0, th + 4, in_w, 2)
            mid = np.full((th + 2) * mid_w * c, np.nan)
            for pair in range((tasks1 + 1) // 2):
                seg = [min(2 * pair + p, tasks1 - 1) for p in range(2)]
                mr = [t // segs1 for t in seg]
                mc = [min((t % segs1) * 16, mid_w - 16) for t in seg]
                acc = conv_segments(halo, in_w, c, c, [r * in_w + m for r, m in zip(mr, mc)],
                                    wsm1, ways)
                for p in range(2):
                    for lane in range(32):
                        g, q = lane // 4, 2 * (lane % 4)
                        for h8 in range(2):
                            col = mc[p] + g + 8 * h8
                            mp = mr[p] * mid_w + col
                            hh, ww = h0 - 1 + mr[p], w0 - 1 + col
                            inside = 0 <= hh < H and 0 <= ww < W
                            for n in range(c // 8):
                                v = acc[p, n, lane, 2 * h8:2 * h8 + 2] + b1[n * 8 + q:n * 8 + q + 2]
                                o = mp * c + (n ^ swizzle(c // 8, mp)) * 8 + q
                                mid[o:o + 2] = np.maximum(v, 0) if inside else 0
            assert not np.isnan(mid).any()
            for warp in range(th * segs2 // 2):
                seg = [2 * warp, 2 * warp + 1]
                base = [(t // segs2) * mid_w + (t % segs2) * 16 for t in seg]
                acc = conv_segments(mid, mid_w, c, c, base, wsm2, ways)
                for p, t in enumerate(seg):
                    store(out, acc[p], b2, h0 + t // segs2, w0 + (t % segs2) * 16)
    want = conv(np.maximum(conv(x, w1, b1), 0), w2, b2)
    np.testing.assert_allclose(out, want, atol=1e-9)
    assert max(ways) == 1


def halo_smem_nchw(x: np.ndarray, h0: int, w0: int, rows: int, cols: int, cin: int) -> np.ndarray:
    """load_halo_nchw: x (SRC_C, H, W) read as the kernel reads it, flat NCHW; each halo
    pixel's channels padded with zeros to cin, its chunks swizzled."""
    src_c, H, W = x.shape
    flat, plane = x.reshape(-1), H * W
    out = np.full(rows * cols * cin, np.nan)
    for p in range(rows * cols):
        hh, ww = h0 - 1 + p // cols, w0 - 1 + p % cols
        inside = 0 <= hh < H and 0 <= ww < W
        v = [flat[c * plane + hh * W + ww] if c < src_c and inside else 0.0 for c in range(cin)]
        for k in range(cin // 8):
            o = p * cin + (k ^ swizzle(cin // 8, p)) * 8
            out[o:o + 8] = v[8 * k:8 * k + 8]
    return out


@pytest.mark.parametrize("th,tw", [(8, 16), (4, 32)])
def test_input_kernel_indexing_equals_the_convolution_of_the_nchw_input(th, tw) -> None:
    """The stem's 9 -> 64 from the NCHW input: the halo padded to 16 channels, then the same
    fragments as any 16-channel tile."""
    rng = np.random.default_rng(tw)
    H, W, src_c, cin, cout = th + 3, tw + 5, 9, 16, 64
    x = rng.standard_normal((src_c, H, W))
    w, b = rng.standard_normal((cout, src_c, 3, 3)), rng.standard_normal(cout)
    w16 = np.zeros((cout, cin, 3, 3))
    w16[:, :src_c] = w  # pack_weight pads the input channels with zero rows
    wsm, ways = weights_smem(w16), []
    out = np.full((H, W, cout), np.nan)
    tasks, segs = th * tw // 16, tw // 16
    for h0 in range(0, H, th):
        for w0 in range(0, W, tw):
            halo = halo_smem_nchw(x, h0, w0, th + 2, tw + 2, cin)
            assert not np.isnan(halo).any()  # every byte of the halo written
            for warp in range(tasks // 2):
                seg = [2 * warp, 2 * warp + 1]
                base = [(t // segs) * (tw + 2) + (t % segs) * 16 for t in seg]
                acc = conv_segments(halo, tw + 2, cin, cout, base, wsm, ways)
                for p, t in enumerate(seg):
                    store(out, acc[p], b, h0 + t // segs, w0 + (t % segs) * 16)
    np.testing.assert_allclose(out, conv(x.transpose(1, 2, 0), w, b), atol=1e-9)
    assert max(ways) == 1

"""One step of a :class:`~ttball.kernels.plan.Plan` as a kernel launch: :class:`ConvLaunch`
(the implicit-GEMM Triton kernel, or per :class:`~ttball.kernels.configs.Config` the TMA,
row-walking, resident-weight, CUDA direct, wgmma or pair kernels) and :class:`TailLaunch` (the
squeeze-excitation tail). Each packs its step's weights once (FP16, padded; biases and SE weights
float32) and, given the shape's buffers and a configuration, launches the step or returns the
Triton launch (:class:`~ttball.kernels.precompile.TritonCall`) to compile ahead."""

from __future__ import annotations

from typing import Any

import torch
import triton
from torch import Tensor

from ttball.kernels.configs import (
    Config,
    conv_configs,
    direct_configs,
    pointwise_configs,
    rows_applies,
    rows_configs,
    tail_configs,
    tma_applies,
    tma_configs,
)
from ttball.kernels.conv import (
    block_k,
    chunk_plan,
    conv_kernel,
    im2col_k,
    pack_weight,
    pack_weight_im2col,
    padded,
)
from ttball.kernels.direct import (
    WGMMA_COLUMNS,
    conv3x3_direct,
    conv3x3_direct_input,
    conv3x3_pair,
    direct_applies,
    wgmma_available,
)
from ttball.kernels.elementwise import se_tail_kernel
from ttball.kernels.plan import INPUT, Conv, SqueezeTail, Step
from ttball.kernels.pointwise import (
    pointwise_applies,
    pointwise_grid,
    pointwise_kernel,
    programs_per_sm,
    sm_count,
)
from ttball.kernels.precompile import TritonCall
from ttball.kernels.rows import conv3x3_rows_kernel, rows_grid

MAX_TERMS = 4  # convolutions summed into one accumulator (the kernels' term slots)


def _nhwc(t: Tensor) -> Tensor:
    if not t.is_contiguous():
        raise ValueError("internal buffers must be contiguous NHWC")
    return t


def _pdl(on: bool) -> dict[str, Any]:
    """The kernel arguments of programmatic dependent launch (:mod:`ttball.kernels.gdc`)."""
    return {"PDL": True, "launch_pdl": True} if on else {}


class ConvLaunch:
    def __init__(self, step: Conv, device: torch.device, pdl: bool = False,
                 tma: bool = False, rows: bool = False, direct: bool = False) -> None:
        if len(step.terms) > MAX_TERMS:
            raise ValueError(f"{step.out}: at most {MAX_TERMS} terms per conv step")
        self.pdl_args = _pdl(pdl)
        self.step = step
        # offer tma_configs / rows_configs / direct_configs to the tuner
        self.tma, self.rows, self.direct = tma, rows, direct
        self.wgmma = direct and wgmma_available(device)  # the wgmma kernel's tiles too
        self.sms = sm_count(device)  # the resident kernel's grid: programs_per_sm per SM
        self._descs: dict[tuple[int, tuple[int, ...], tuple[int, ...]], Any] = {}
        self.weights = [pack_weight(t.weight, device) for t in step.terms]
        t0 = step.terms[0]
        self.im2col = t0.ksize == 3 and t0.up == 0 and t0.cin < 16  # the 9-channel stem
        self.w0_im2col = pack_weight_im2col(t0.weight, device) if self.im2col else None
        self._metas: dict[tuple[Config, int], dict[str, Any]] = {}
        self.partner: ConvLaunch | None = None  # the next step, if the pair kernel can run both
        n = padded(step.cout)
        self.bias = torch.zeros(n, device=device)
        self.bias[: step.cout] = step.bias.to(device)
        meta: dict[str, Any] = {"COUT": step.cout, "N_TERMS": len(step.terms), "BLOCK_N": n}
        meta.update(C0=t0.cin, P0=padded(t0.cin), K0=t0.ksize, S0=t0.stride, U0=t0.up,
                    BK0=block_k(t0.cin))
        for k in range(1, MAX_TERMS):
            t = step.terms[k] if k < len(step.terms) else t0
            if k < len(step.terms) and t.cin != padded(t.cin):
                raise ValueError(f"{step.out}: term {k} needs a power-of-two Cin >= 16")
            meta.update({f"C{k}": t.cin, f"K{k}": t.ksize, f"S{k}": t.stride, f"U{k}": t.up,
                         f"BK{k}": block_k(t.cin)})
        add_up = step.addends[0][1] if step.addends else 0
        if len(step.addends) > 1:
            raise ValueError(f"{step.out}: one addend per conv step")
        meta.update(HAS_ADD=bool(step.addends), ADD_UP=add_up, HAS_SUM=step.se_sum is not None,
                    RELU=step.relu)
        self.meta = meta

    def variant_meta(self, cfg: Config, wo: int) -> dict[str, Any]:
        """``self.meta`` with the variant constexprs of ``cfg`` (the default config: unchanged,
        so the first version's kernel is compiled for it)."""
        if (cfg, wo) in self._metas:
            return self._metas[cfg, wo]
        meta = dict(self.meta)
        if cfg.tile_w:  # a tile no wider than the (padded) row, no taller than block_m
            meta["TILE_W"] = min(cfg.tile_w, triton.next_power_of_2(wo), cfg.block_m)
        if cfg.l1:
            meta["L1"] = True
        if cfg.programs:
            meta["PROGRAMS"] = cfg.programs
        if cfg.tma and tma_applies(self.step):
            if not cfg.tile_w:
                raise ValueError(f"{cfg}: TMA needs a 2-D tile (tile_w)")
            meta["TMA"] = True
        if cfg.k_chunk:
            for k, t in enumerate(self.step.terms):
                taps, bk = chunk_plan(t.cin, t.ksize, cfg.k_chunk)
                meta.update({f"T{k}": taps, f"BK{k}": bk})
            if self.im2col:
                t0 = self.step.terms[0]
                kpad = im2col_k(t0.cin, t0.ksize)
                meta.update(IM0=True, P0=kpad, BK0=min(cfg.k_chunk, kpad), T0=1)
        self._metas[cfg, wo] = meta
        return meta

    def out_pixels(self, bufs: dict[str, Tensor]) -> int:
        out = bufs[self.step.out]
        return out.shape[0] * out.shape[1] * out.shape[2]

    def configs(self, bufs: dict[str, Tensor]) -> list[Config]:
        pixels = self.out_pixels(bufs)
        extra = tma_configs(self.step, pixels) if self.tma else []
        extra += rows_configs(self.step, pixels) if self.rows else []
        extra += direct_configs(self.step, pixels, self.wgmma) if self.direct else []
        return conv_configs(self.step, pixels) + pointwise_configs(self.step, pixels) + extra

    def descriptor(self, x: Tensor, box: tuple[int, ...]) -> Any:
        """A TMA descriptor of the NHWC buffer ``x`` (one per buffer and box; a buffer is
        reused along the plan, so is its descriptor)."""
        from triton.tools.tensor_descriptor import TensorDescriptor

        key = (x.data_ptr(), tuple(x.shape), box)
        if key not in self._descs:
            self._descs[key] = TensorDescriptor(_nhwc(x), list(x.shape), list(x.stride()),
                                                list(box))
        return self._descs[key]

    def runs_cuda(self, cfg: Config) -> bool:
        """Whether ``cfg`` runs the step with the CUDA C++ kernels (direct or pair), not
        Triton."""
        return bool(cfg.pair) or bool(cfg.direct and direct_applies(self.step))

    def __call__(self, bufs: dict[str, Tensor], sums: dict[str, Tensor], cfg: Config) -> None:
        step = self.step
        if cfg.pair == 2:  # computed with the previous step by the pair kernel
            return
        if cfg.pair == 1 and self.partner is not None:
            second = self.partner.step
            conv3x3_pair(bufs[second.out], _nhwc(bufs[step.terms[0].src]), self.weights[0],
                         self.bias, self.partner.weights[0], self.partner.bias,
                         sums[second.se_sum] if second.se_sum else None,
                         (cfg.direct, cfg.block_m), second.relu, pipelined=cfg.num_stages > 1)
            return
        if cfg.direct and direct_applies(step):
            src, tile = bufs[step.terms[0].src], (cfg.direct, cfg.block_m)
            if step.terms[0].src == INPUT:  # the NHWC view of the FP32 NCHW batch
                conv3x3_direct_input(bufs[step.out], src.permute(0, 3, 1, 2), self.weights[0],
                                     self.bias, tile, step.relu, pipelined=cfg.num_stages > 1,
                                     tma=cfg.tma)
                return
            conv3x3_direct(bufs[step.out], _nhwc(src), self.weights[0], self.bias,
                           sums[step.se_sum] if step.se_sum else None, tile, step.relu,
                           pipelined=cfg.num_stages > 1,
                           warpgroups=(cfg.num_warps // 4 if cfg.block_m in WGMMA_COLUMNS
                                       else 1),
                           tma=cfg.tma, rs=cfg.rs, taps=cfg.taps)
            return
        self.triton_call(bufs, sums, cfg).launch()

    def triton_call(self, bufs: dict[str, Tensor], sums: dict[str, Tensor],
                    cfg: Config) -> TritonCall:
        """The Triton launch that runs the step with ``cfg`` (not for the CUDA kernels: a
        config with ``pair`` or a ``direct`` tile the step takes)."""
        step, out = self.step, bufs[self.step.out]
        B, Ho, Wo, _ = out.shape
        add = _nhwc(bufs[step.addends[0][0]]) if step.addends else out
        se_sum = sums[step.se_sum] if step.se_sum else self.bias
        if cfg.rows and rows_applies(step):
            return self._rows(bufs, out, add, se_sum, cfg)
        if cfg.resident and pointwise_applies(step):
            return self._resident(bufs, out, add, se_sum, cfg)
        meta = self.variant_meta(cfg, Wo)
        x0 = bufs[step.terms[0].src]
        w0 = self.weights[0]
        if meta.get("IM0"):  # the stem, read as im2col: variant_meta sets it only there
            assert self.w0_im2col is not None
            w0 = self.w0_im2col
        xs = [_nhwc(bufs[t.src]) for t in step.terms[1:]]
        ws = self.weights[1:]
        pairs: list[Tensor] = []
        for k in range(MAX_TERMS - 1):
            pairs += [xs[k], ws[k]] if k < len(xs) else [x0, w0]
        if "TILE_W" in meta:
            tile_w = meta["TILE_W"]
            tiles = triton.cdiv(Ho, cfg.block_m // tile_w) * triton.cdiv(Wo, tile_w)
        else:
            tiles = triton.cdiv(Ho * Wo, cfg.block_m)
        src0: Any = x0
        if meta.get("TMA"):
            tile_w = meta["TILE_W"]
            src0 = self.descriptor(x0, (1, cfg.block_m // tile_w, tile_w, meta["BK0"]))
        grid = (min(cfg.programs, tiles * B), 1) if cfg.programs else (tiles, B)
        return TritonCall(
            conv_kernel, grid,
            (out, self.bias, add, se_sum, src0, w0, *pairs, Ho, Wo, *out.stride(),
             x0.shape[1], x0.shape[2], *x0.stride(), B),
            {**meta, "BLOCK_M": cfg.block_m, "num_warps": cfg.num_warps,
             "num_stages": cfg.num_stages, **self.pdl_args},
        )

    def _resident(self, bufs: dict[str, Tensor], out: Tensor, add: Tensor, se_sum: Tensor,
                  cfg: Config) -> TritonCall:
        """The step through :func:`~ttball.kernels.pointwise.pointwise_kernel` (``add``,
        ``se_sum``: as for the conv kernel); unused term slots repeat term 0."""
        B, Ho, Wo, _ = out.shape
        terms, m = self.step.terms, self.meta
        pairs: list[Tensor] = []
        cins: dict[str, int] = {}
        for k in range(MAX_TERMS):
            j = k if k < len(terms) else 0
            pairs += [_nhwc(bufs[terms[j].src]), self.weights[j]]
            cins.update({f"C{k}": terms[j].cin, f"P{k}": padded(terms[j].cin)})
        tiles = B * triton.cdiv(Ho * Wo, cfg.block_m)
        grid = pointwise_grid(tiles, cfg.programs or programs_per_sm(cfg.num_warps) * self.sms)
        return TritonCall(
            pointwise_kernel, grid,
            (out, self.bias, add, se_sum, *pairs, Ho, Wo, *out.stride(), B),
            dict(COUT=m["COUT"], N_TERMS=m["N_TERMS"], **cins, HAS_ADD=m["HAS_ADD"],
                 ADD_UP=m["ADD_UP"], HAS_SUM=m["HAS_SUM"], RELU=m["RELU"],
                 BLOCK_M=cfg.block_m, BLOCK_N=m["BLOCK_N"], NUM_STAGES=cfg.num_stages,
                 num_warps=cfg.num_warps, num_stages=cfg.num_stages, **self.pdl_args),
        )

    def _rows(self, bufs: dict[str, Tensor], out: Tensor, add: Tensor, se_sum: Tensor,
              cfg: Config) -> TritonCall:
        """The step through :func:`conv3x3_rows_kernel` (``add``, ``se_sum``: as for the conv
        kernel, stand-ins where the step has none)."""
        B, Ho, Wo, _ = out.shape
        m = self.meta
        return TritonCall(
            conv3x3_rows_kernel, rows_grid(Ho, Wo, B, cfg.block_m, cfg.rows),
            (out, _nhwc(bufs[self.step.terms[0].src]), self.weights[0], self.bias, add, se_sum,
             Ho, Wo, *out.stride()),
            dict(CIN=m["C0"], COUT=m["COUT"], BLOCK_N=m["BLOCK_N"], BLOCK_W=cfg.block_m,
                 ROWS=cfg.rows, HAS_ADD=m["HAS_ADD"], ADD_UP=m["ADD_UP"], HAS_SUM=m["HAS_SUM"],
                 RELU=m["RELU"], num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                 **self.pdl_args),
        )


class TailLaunch:
    def __init__(self, step: SqueezeTail, device: torch.device, pdl: bool = False) -> None:
        if len(step.terms) > MAX_TERMS - 1:
            raise ValueError(f"{step.y}: at most {MAX_TERMS - 1} terms in a tail")
        self.pdl_args = _pdl(pdl)
        self.step = step
        c, hid = step.channels, step.fc1.shape[0]
        hid_pad = max(2, triton.next_power_of_2(hid))
        self.fc1 = torch.zeros(c, hid_pad, device=device)
        self.fc1[:, :hid] = step.fc1.T.to(device)
        self.fc2 = torch.zeros(hid_pad, c, device=device)
        self.fc2[:hid] = step.fc2.T.to(device)
        self.weights = [pack_weight(t.weight, device) for t in step.terms]
        self.bias = torch.zeros(c, device=device)
        if step.bias is not None:
            self.bias.copy_(step.bias.to(device))
        meta: dict[str, Any] = {"C": c, "HID": hid_pad, "STORE_T": step.out is not None,
                                "N_TERMS": len(step.terms)}
        for k in range(1, MAX_TERMS):
            t = step.terms[k - 1] if k <= len(step.terms) else None
            cin = t.cin if t else c
            meta.update({f"C{k}": cin, f"U{k}": t.up if t else 0, f"BK{k}": block_k(cin)})
        head_n, head_pad = 1, 16
        self.head_w = self.head_b = self.bias
        if step.head is not None:
            head_n = step.head.weight.shape[0]
            self.head_w = pack_weight(step.head.weight[:, :, None, None], device)
            head_pad = self.head_w.shape[1]
            self.head_b = torch.zeros(head_pad, device=device)
            self.head_b[:head_n] = step.head.bias.to(device)
        if step.proj is not None:  # the head's pointers carry the projection (no terms)
            self.head_w = pack_weight(step.proj.weight[:, :, None, None], device)
            head_n, head_pad = step.proj.weight.shape[0], self.head_w.shape[1]
            if step.terms or step.head is not None or head_n != head_pad:
                raise ValueError(f"{step.y}: a projection needs a tail without terms or head, "
                                 "and 16, 32, ... output channels")
            self.head_b = step.proj.bias.to(device, torch.float32)
        meta.update(HEAD=step.head is not None, HEAD_N=head_n, HEAD_PAD=head_pad,
                    PROJ=step.proj is not None)
        self.meta = meta

    def configs(self, bufs: dict[str, Tensor]) -> list[Config]:
        y = bufs[self.step.y]
        return tail_configs(self.step, y.shape[0] * y.shape[1] * y.shape[2])

    def __call__(self, bufs: dict[str, Tensor], sums: dict[str, Tensor], cfg: Config) -> None:
        self.triton_call(bufs, sums, cfg).launch()

    def triton_call(self, bufs: dict[str, Tensor], sums: dict[str, Tensor],
                    cfg: Config) -> TritonCall:
        step = self.step
        y, res = _nhwc(bufs[step.y]), _nhwc(bufs[step.residual])
        B, Ho, Wo, _ = y.shape
        t = _nhwc(bufs[step.out]) if step.out else y
        pairs = []
        for k in range(MAX_TERMS - 1):
            if k < len(step.terms):
                pairs += [_nhwc(bufs[step.terms[k].src]), self.weights[k]]
            else:
                pairs += [y, self.bias]
        if step.head is not None:
            f = bufs[step.head.out]
        elif step.proj is not None:
            f = _nhwc(bufs[step.proj.out])
        elif step.fused is not None:
            f = _nhwc(bufs[step.fused])
        else:
            f = y
        return TritonCall(
            se_tail_kernel, (triton.cdiv(Ho * Wo, cfg.block_m), B),
            (y, res, sums[step.se_sum], self.fc1, self.fc2, t, self.bias, *pairs, f,
             self.head_w, self.head_b, Ho, Wo, 1.0 / (Ho * Wo), *f.stride()),
            {**self.meta, "BLOCK_M": cfg.block_m, "num_warps": cfg.num_warps,
             "num_stages": cfg.num_stages, **self.pdl_args},
        )


Launch = ConvLaunch | TailLaunch


def launcher(step: Step, device: torch.device, pdl: bool, tma: bool, rows: bool,
              direct: bool = False) -> Launch:
    if isinstance(step, Conv):
        return ConvLaunch(step, device, pdl, tma, rows, direct)
    return TailLaunch(step, device, pdl)

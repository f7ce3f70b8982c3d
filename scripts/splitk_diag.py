"""Where the split-K kernel (ttball.kernels.splitk) goes wrong on a GPU (thirteenth session:
its standalone tests passed, the network with it forced or tuned did not).

For the epilogue in the tile's last program (``splitk.FUSED``) and in a second launch,
three probes, each printing one line per case with the relative difference:
  standalone  the kernel alone against the plain conv kernel, on level-3-like shapes;
  in-plan     the network run step by step on one stream, each split-K step run both ways on
              the same inputs (the SE sums restored between);
  network     every split-K step forced: sequential eager, branches eager, the -direct backend
              (CUDA graphs).
Usage (GPU): python scripts/splitk_diag.py
"""

from __future__ import annotations

import torch

from ttball.kernels.executor import Config, TritonExecutor, _ConvLaunch, splitk_configs
from ttball.kernels.plan import Conv, Term, build_plan
from ttball.kernels.splitk import splitk_applies
from ttball.model import BlurBall, randomize_batchnorm

DEV = torch.device("cuda")
PLAIN = Config(64, 4, 2)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def standalone() -> None:
    g = torch.Generator().manual_seed(0)
    for B, H, W in [(1, 4, 6), (1, 18, 32), (2, 18, 32), (1, 36, 64)]:
        for se in (False, True):
            w = torch.randn(128, 128, 3, 3, generator=g) * 0.03
            step = Conv("y", (Term("x", w),), torch.randn(128, generator=g) * 0.1,
                        relu=not se, se_sum="s" if se else None)
            launch = _ConvLaunch(step, DEV, direct=True)
            x = torch.randn(B, H, W, 128, generator=g).to(DEV, torch.float16)
            ref = {"x": x, "y": torch.empty(B, H, W, 128, device=DEV, dtype=torch.float16)}
            ref_s = {"s": torch.zeros(B, 128, device=DEV)}
            launch(ref, ref_s, PLAIN)
            for cfg in splitk_configs(step, B * H * W) or [Config(64, 4, 2, split=9)]:
                for rep in range(3):
                    got = {"x": x, "y": torch.full_like(ref["y"], float("nan"))}
                    s = {"s": torch.zeros(B, 128, device=DEV)}
                    launch(got, s, cfg)
                    torch.cuda.synchronize()
                    print(f"standalone B={B} {H}x{W} se={se} {cfg.short()} rep {rep}: "
                          f"y {rel(got['y'], ref['y']):.1e} s {rel(s['s'], ref_s['s']):.1e}",
                          flush=True)


def in_plan(plan, x: torch.Tensor) -> None:
    ex = TritonExecutor(plan, DEV, tune=False)
    ex(x)
    shape = tuple(x.shape)
    bufs = ex._buffers[shape]
    bufs.tensors["input"] = x.permute(0, 2, 3, 1)
    bufs.sum_block.zero_()
    for i, (launch, cfg) in enumerate(zip(ex.launches, ex._configs[shape])):
        step = launch.step
        if isinstance(step, Conv) and splitk_applies(step):
            out = bufs.tensors[step.out]
            for split in splitk_configs(step, launch.out_pixels(bufs.tensors)) or [
                    Config(64, 4, 2, split=9)]:
                saved = bufs.sum_block.clone()
                out.fill_(float("nan"))
                launch(bufs.tensors, bufs.sums, split)
                got, got_s = out.clone(), bufs.sum_block.clone()
                bufs.sum_block.copy_(saved)
                launch(bufs.tensors, bufs.sums, cfg)
                torch.cuda.synchronize()
                print(f"in-plan step {i} {step.out} {tuple(out.shape)} relu={step.relu} "
                      f"se={step.se_sum} {split.short()}: y {rel(got, out):.1e} "
                      f"sums {rel(got_s, bufs.sum_block):.1e}", flush=True)
        else:
            launch(bufs.tensors, bufs.sums, cfg)


def network(model, plan, x: torch.Tensor) -> None:
    from ttball.backends import create

    want = TritonExecutor(plan, DEV, tune=False)(x).clone()
    forced = Config(64, 4, 2, split=9)
    for branches in (False, True):
        ex = TritonExecutor(plan, DEV, tune=False, branches=branches)
        for la in ex.launches:
            if isinstance(la.step, Conv) and splitk_applies(la.step):
                la.configs = lambda bufs, cfg=forced: [cfg]
        for rep in range(3):
            got = ex(x).clone()
            torch.cuda.synchronize()
            print(f"network branches={branches} call {rep}: {rel(got, want):.1e}", flush=True)
    for name in ("triton-fp16", "triton-fp16-direct"):
        backend = create(name, model, DEV, tune=False)
        for la in backend.executor.launches:
            if isinstance(la.step, Conv) and splitk_applies(la.step):
                la.configs = lambda bufs, cfg=forced: [cfg]
        for rep in range(4):
            got = backend(x).float().clone()
            torch.cuda.synchronize()
            print(f"network {name} call {rep}: {rel(got, want):.1e}", flush=True)
        print(f"  pdl={getattr(backend.executor.launches[0], 'pdl_args', None)}", flush=True)


def main() -> None:
    from ttball.kernels import splitk

    torch.manual_seed(0)
    model = randomize_batchnorm(BlurBall(), seed=0).eval()
    plan = build_plan(model)
    x = torch.randn(1, 9, 144, 256, generator=torch.Generator().manual_seed(3)).to(DEV)
    for fused in (True, False):
        splitk.FUSED = fused
        print(f"== FUSED={fused}", flush=True)
        for probe in (standalone, lambda: in_plan(plan, x), lambda: network(model, plan, x)):
            try:
                probe()
            except Exception as exc:  # noqa: BLE001  (a diagnostic: report and go on)
                print(f"probe failed: {type(exc).__name__}: {exc}", flush=True)


if __name__ == "__main__":
    main()

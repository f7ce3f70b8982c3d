"""The conv kernel's variants compile for an H100/H200 (sm_90) without a GPU: the executor's
own launch code runs with Triton's ``JITFunction.run`` replaced by a compile for
``GPUTarget("cuda", 90, 64)`` with the specialization a real launch would get (16-byte
alignment of pointers and of integers divisible by 16, integers equal to 1 folded), then the
PTX is checked for what the variant is for (L1-cached ``cp.async.ca`` gathers, wgmma, 4-D
tensor copies with TMA, and with programmatic dependent launch the ``griddepcontrol``
instructions before any load). The device pipeline's kernels compile too, and the pixel
kernels (resize, normalisation) once for every launch a worker makes.

It runs in a subprocess: the other kernel tests import Triton in interpreter mode, and this
needs it compiled. About 6 s on two cores; skipped where Triton's NVIDIA backend is missing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("triton", reason="triton is not installed (the dev extra installs it)")
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

ROOT = Path(__file__).resolve().parents[2]


def _compile_launches_for_sm90() -> list[Any]:
    """From now on in this process, a Triton kernel launch compiles the kernel for
    ``GPUTarget("cuda", 90, 64)`` with the launch's specialization instead of running it; the
    returned list collects the compiled kernels."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile, make_backend
    from triton.runtime import jit

    target = GPUTarget("cuda", 90, 64)
    backend = make_backend(target)
    compiled: list[Any] = []

    def compile_only(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        binder = jit.create_function_from_signature(self.signature, self.params, backend)
        bound, specialization, options = binder(*args, **kwargs)
        opts, signature, constexprs, attrs = self._pack_args(backend, kwargs, bound,
                                                             specialization, options)
        src = ASTSource(self, signature, constexprs, attrs)
        compiled.append(compile(src, target=target, options=opts.__dict__))

    jit.JITFunction.run = compile_only  # type: ignore[method-assign]
    return compiled


def compile_conv_steps() -> list[dict[str, Any]]:
    """In a process with Triton compiled: one new-variant launch per kind of conv step."""
    import torch

    from ttball.kernels.configs import Config
    from ttball.kernels.launches import ConvLaunch, TailLaunch
    from ttball.kernels.plan import INPUT, Conv, SqueezeTail, Term

    compiled = _compile_launches_for_sm90()
    cpu = torch.device("cpu")

    def term(src: str, cout: int, cin: int, k: int, stride: int = 1, up: int = 0) -> Term:
        return Term(src, torch.randn(cout, cin, k, k), stride, up)

    cases = [  # (name, step, {buffer: shape (B, H, W, C)}, config)
        ("16->16 tile16 kc64", Conv("y", (term("x", 16, 16, 3),), torch.zeros(16), relu=True),
         {"x": (2, 288, 512, 16), "y": (2, 288, 512, 16)},
         Config(128, 4, 2, tile_w=16, k_chunk=64, l1=True)),
        ("128->16 tile32 kc64", Conv("y", (term("x", 16, 128, 3),), torch.zeros(16)),
         {"x": (2, 288, 512, 128), "y": (2, 288, 512, 16)},
         Config(256, 8, 2, tile_w=32, k_chunk=64, l1=True)),
        ("stem im2col", Conv("y", (term(INPUT, 64, 9, 3),), torch.zeros(64), relu=True),
         {INPUT: (2, 288, 512, 9), "y": (2, 288, 512, 64)},
         Config(128, 4, 1, tile_w=32, k_chunk=128, l1=True)),
        ("fuse 4 terms", Conv("y", (term("a", 64, 16, 3, 2), term("b", 64, 32, 3),
                                    term("c", 64, 64, 1, up=1), term("d", 64, 128, 1, up=2)),
                              torch.zeros(64), addends=(("e", 1),), relu=True, se_sum="s"),
         {"a": (2, 288, 512, 16), "b": (2, 144, 256, 32), "c": (2, 72, 128, 64),
          "d": (2, 36, 64, 128), "e": (2, 72, 128, 64), "y": (2, 144, 256, 64)},
         Config(128, 4, 2, tile_w=16, k_chunk=64, l1=True)),
    ]
    cases.append(("16->16 pdl", *cases[0][1:]))
    cases.append(("16->16 tma", *cases[0][1:3], Config(128, 4, 3, tile_w=16, tma=True)))
    cases.append(("128->16 tma", *cases[1][1:3], Config(64, 4, 3, tile_w=16, tma=True)))
    cases.append(("16->16 rows", *cases[0][1:3], Config(128, 8, 1, rows=16)))
    cases.append(("fuse 4 terms programs", *cases[3][1:3],
                  Config(128, 4, 2, tile_w=16, k_chunk=64, l1=True, programs=33)))
    cases.append(("32->32 rows se pdl",
                  Conv("y", (term("x", 32, 32, 3),), torch.zeros(32), se_sum="s"),
                  {"x": (2, 144, 256, 32), "y": (2, 144, 256, 32)}, Config(64, 4, 1, rows=16)))
    bottleneck = (Conv("y", (term("h", 128, 32, 1), term("x", 128, 64, 1)), torch.zeros(128),
                       relu=True),
                  {"h": (2, 288, 512, 32), "x": (2, 288, 512, 64), "y": (2, 288, 512, 128)})
    cases.append(("bottleneck resident", *bottleneck, Config(64, 4, 3, resident=True)))
    cases.append(("bottleneck resident m128 pdl", *bottleneck,
                  Config(128, 8, 2, resident=True)))
    report = []
    for name, step, shapes, config in cases:
        bufs = {k: torch.empty(*s, dtype=torch.float16) for k, s in shapes.items()}
        if INPUT in bufs:  # the float32 NCHW batch, seen as NHWC
            b, h, w, c = shapes[INPUT]
            bufs[INPUT] = torch.empty(b, c, h, w).permute(0, 2, 3, 1)
        sums = {"s": torch.zeros(2, step.cout)}
        ConvLaunch(step, cpu, pdl=name.endswith("pdl"))(bufs, sums, config)
        report.append(_ptx_report(name, compiled[-1]))
    # the tail kernel with PDL: the SE weights are read before the wait, the sums after it
    tail = SqueezeTail("y", "r", "s", torch.randn(1, 16), torch.randn(16, 1), out="t")
    bufs = {k: torch.empty(2, 288, 512, 16, dtype=torch.float16) for k in "yrt"}
    TailLaunch(tail, cpu, pdl=True)(bufs, {"s": torch.zeros(2, 16)}, Config(128, 4, 1))
    report.append(_ptx_report("tail pdl", compiled[-1]))
    return report


def _ptx_report(name: str, kernel: Any) -> dict[str, Any]:
    ptx = kernel.asm["ptx"]
    wait = ptx.find("griddepcontrol.wait")
    reads = [m.start() for m in re.finditer(r"ld\.global|cp\.async", ptx)]
    return {"name": name, "kernel": kernel.name, "shared": kernel.metadata.shared,
            "cp_async": len(re.findall(r"cp\.async\.c[ag]\.", ptx)),
            "cp_async_ca": len(re.findall(r"cp\.async\.ca", ptx)),
            "wgmma": len(re.findall(r"wgmma\.mma_async", ptx)),
            "tma_loads": len(re.findall(r"cp\.async\.bulk\.tensor\.4d", ptx)),
            "ld_global": len(re.findall(r"ld\.global", ptx)),
            "gdc_wait": ptx.count("griddepcontrol.wait"),
            "gdc_launch": ptx.count("griddepcontrol.launch_dependents"),
            "reads_before_wait": sum(r < wait for r in reads) if wait >= 0 else None}


def _in_compiled_triton(function: str, tmp_path: Path) -> list[dict[str, Any]]:
    """``function`` of this module run in a subprocess with Triton compiled (not interpreted),
    its cache under ``tmp_path``; its JSON result. Skips where Triton has no NVIDIA backend."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(Path(__file__).parent)])
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # never ~/.triton from a test
    code = f"import json, test_sm90_compile as t; print(json.dumps(t.{function}()))"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=False,
                          text=True, timeout=300)
    if proc.returncode and "make_backend" in proc.stderr + proc.stdout:
        pytest.skip(f"no NVIDIA backend in this Triton: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_variants_compile_for_sm90(tmp_path: Path) -> None:
    report = {r["name"]: r for r in _in_compiled_triton("compile_conv_steps", tmp_path)}
    for name, r in report.items():
        assert r["wgmma"] > 0 or name == "tail pdl", f"{name}: no wgmma in the PTX: {r}"
        assert r["shared"] <= 227 * 1024, f"{name}: too much shared memory: {r}"
    for name in ("16->16 tile16 kc64", "128->16 tile32 kc64", "fuse 4 terms"):
        assert report[name]["cp_async_ca"] > 0, f"{name}: gathers not L1-cached: {report[name]}"
    assert report["stem im2col"]["ld_global"] > 0  # one K chunk: plain loads, no pipeline
    # programmatic dependent launch: one wait and one trigger, and no load before the wait in
    # the conv kernel; the tail kernel loads its two SE weight matrices first (ttball.kernels.gdc)
    for name in ("16->16 pdl", "tail pdl"):
        assert report[name]["gdc_wait"] == 1 and report[name]["gdc_launch"] == 1, report[name]
    assert report["16->16 pdl"]["reads_before_wait"] == 0, report["16->16 pdl"]
    assert 0 < report["tail pdl"]["reads_before_wait"], report["tail pdl"]
    assert report["16->16 tile16 kc64"]["gdc_wait"] == 0  # without PDL: the kernel as before
    # TMA: the activations arrive as 4-D tensor copies (the weights keep their small copies)
    for name in ("16->16 tma", "128->16 tma"):
        assert report[name]["tma_loads"] > 0 and report[name]["wgmma"] > 0, report[name]
    assert report["16->16 tile16 kc64"]["tma_loads"] == 0
    # a fixed number of programs: the same tile code in a loop (same wgmma and gathers)
    looped, plain = report["fuse 4 terms programs"], report["fuse 4 terms"]
    assert looped["wgmma"] == plain["wgmma"] and looped["cp_async_ca"] == plain["cp_async_ca"]
    # the row-walking kernel (ttball.kernels.rows) with PDL: one wait (its weights are read
    # before it, so the count of reads before the wait does not tell activations apart)
    assert report["32->32 rows se pdl"]["gdc_wait"] == 1
    # the resident 1×1 kernel (ttball.kernels.pointwise): activations through cp.async (its
    # tile loop pipelined), the shared memory of as many programs as its grid puts on an SM
    # in one SM's 228 KB (1 KB reserved per block); with PDL, the weights (plain loads) before
    # the wait
    from ttball.kernels.pointwise import programs_per_sm

    for name, warps in (("bottleneck resident", 4), ("bottleneck resident m128 pdl", 8)):
        r = report[name]
        assert r["kernel"] == "pointwise_kernel" and r["cp_async"] > 0, r
        assert programs_per_sm(warps) * (r["shared"] + 1024) <= 228 * 1024, r
    pdl = report["bottleneck resident m128 pdl"]
    assert pdl["gdc_wait"] == 1 and pdl["reads_before_wait"] > 0, pdl


def compile_post_kernels() -> list[dict[str, Any]]:
    """In a process with Triton compiled: the device pipeline's fused peak search, flood and
    window statistics (``ttball.kernels.prepost_fused``), launched on CPU tensors of the e2e's
    shapes."""
    import torch

    from ttball.kernels.prepost_fused import flood_crops, peak_values, window_stats, windows

    compiled = _compile_launches_for_sm90()
    peak_values(torch.rand(96, 288, 512), torch.full((96,), 0.5))
    flood_crops(torch.ones(96, 4, 31, 31, dtype=torch.bool), torch.ones(96, 4, dtype=torch.bool), 31)
    ones = torch.ones(96, 4, dtype=torch.bool)
    lines = torch.arange(31).expand(96, 4, 31)
    window_stats(torch.rand(96, 4, 31, 31), torch.ones(96, 4, 31, 31, dtype=torch.bool), lines,
                 lines, ones, ones, torch.zeros(96, dtype=torch.int64), 288, 512)
    windows(torch.rand(96, 288, 512), torch.full((96,), 0.5), torch.rand(96, 4),
            torch.randint(0, 288 * 512, (96, 4)), torch.zeros(96, dtype=torch.int64), 31, 31)
    return [{"name": k.name, "shared": k.metadata.shared,
             "bar_sync": len(re.findall(r"bar\.sync", k.asm["ptx"])),
             "ld_global": len(re.findall(r"ld\.global", k.asm["ptx"]))} for k in compiled]


def test_the_fused_post_kernels_compile_for_sm90(tmp_path: Path) -> None:
    peak, flood, sums, pack, window, pack2 = _in_compiled_triton("compile_post_kernels", tmp_path)
    assert peak["name"] == "_peak_kernel" and peak["ld_global"] > 0
    assert sums["name"] == "_window_sums_kernel" and pack["name"] == "_window_pack_kernel"
    # level 2: gather, flood and sums in one kernel (the flood's barriers in it)
    assert window["name"] == "_window_kernel" and window["bar_sync"] >= 2
    assert pack2["name"] == "_window_pack_kernel"
    # the flood's steps: a barrier after the store and after the loads of every step
    assert flood["name"] == "_flood_kernel" and flood["bar_sync"] >= 2


def compile_pixel_kernels() -> list[dict[str, Any]]:
    """In a process with Triton compiled: the resize and the normaliser
    (``ttball.kernels.prepost_pixels``) launched as a worker launches them: the resize's
    warm-up frames, then 720p and 1080p batches, a permuted batch, an output slice and runs
    inside a decode buffer (a run of one is a distance of 0); the normaliser at two batch
    sizes."""
    import torch

    from ttball.kernels.prepost_image import Resizer
    from ttball.kernels.prepost_pixels import Normalizer, resize, runs
    from ttball.model.config import WeightsConfig

    compiled = _compile_launches_for_sm90()
    resizer = Resizer(288, 512)
    for n, height, width in ((2, 16, 24), (8, 720, 1280), (1, 1080, 1920)):
        frames = torch.zeros(n, 3, height, width, dtype=torch.uint8)
        tables = resizer._table(height, width, frames.device)
        resize(frames, *tables)
        resize(frames.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2), *tables)
        resize(frames, *tables, out=torch.empty(n + 1, 3, 288, 512, dtype=torch.uint8)[1:])
    buffer = torch.zeros(5, 3, 720, 1280, dtype=torch.uint8)
    for view in runs([*buffer[1:4].unbind(0), buffer[0]]):
        resize(view, *resizer._table(720, 1280, view.device))
    normalizer = Normalizer(WeightsConfig(), "cpu")
    for n in (1, 16):
        normalizer._kernel(torch.zeros(n, 9, 288, 512, dtype=torch.uint8))
    return [{"name": k.name, "hash": k.hash} for k in compiled]


def test_the_pixel_kernels_compile_once_for_every_launch(tmp_path: Path) -> None:
    """A worker compiles each during its warm-up and never again: no source size, layout,
    output slice or run of frames makes Triton specialize it anew (a live push would wait
    for the compile)."""
    launches = _in_compiled_triton("compile_pixel_kernels", tmp_path)
    resizes = [k for k in launches if k["name"] == "_resize_kernel"]
    normalizes = [k for k in launches if k["name"] == "_normalize_kernel"]
    assert len(resizes) == 11 and len({k["hash"] for k in resizes}) == 1
    assert len(normalizes) == 2 and len({k["hash"] for k in normalizes}) == 1

"""``ttball bench``: option parsing, variant selection, cost model, kernel categories, and a
``--quick`` run on a small input whose reports are checked field by field."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.autograd import DeviceType

from ttball.backends import base
from ttball.backends.eager import EagerBackend
from ttball.bench import ROW_KEYS, select_variants
from ttball.bench.profiling import _cuda_summary, classify
from ttball.bench.roofline import network_cost
from ttball.cli import COMMANDS, main
from ttball.cli.bench import parse_batches, parse_size
from ttball.errors import UserError

CPU = torch.device("cpu")
FAKE = "test-cached-fp32"


pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def test_parse_batches_and_size() -> None:
    assert parse_batches("1,2,3") == (1, 2, 3)
    assert parse_batches("4, 4,8") == (4, 8)
    for bad in ("", "0", "1,x", "-1"):
        with pytest.raises(UserError):
            parse_batches(bad)
    assert parse_size("288x512") == (288, 512)
    for bad in ("288", "287x512", "axb"):
        with pytest.raises(UserError):
            parse_size(bad)


def test_select_variants() -> None:
    everything = select_variants(None, CPU)
    assert everything[0] == "eager-fp32" and "compile" not in everything
    assert select_variants(["folded-fp16*", "eager-fp32", "folded-fp16"], CPU) == [
        "folded-fp16",
        "folded-fp16-cl",
        "eager-fp32",
    ]
    assert select_variants(["compile"], CPU) == ["compile"]  # generic entry only by its name
    for bad in (["no-such-backend"], ["zzz*"], ["eager-fp32", "no-such-backend"]):
        with pytest.raises(UserError, match="no backend matches"):
            select_variants(bad, CPU)
    assert select_variants(["eager-fp32", "not-installed-*"], CPU) == ["eager-fp32"]


def test_network_cost_matches_the_spec() -> None:
    cost = network_cost(288, 512)
    assert cost.flops / 1e9 == pytest.approx(56.3, abs=0.05)
    assert cost.floor_bytes("fp16") / 1e6 == pytest.approx(576, abs=1)


def test_a_ceiling_below_what_a_variant_achieved_is_measured_again(monkeypatch) -> None:
    """A ceiling measured while the machine was busy read 50 % low: a variant at 150 % of it
    makes the run measure it again and keep the larger; one above even that stays over 100 %."""
    import torch

    from ttball.bench import roofline

    measured = iter([1e12, 2e12, 2.5e12])
    monkeypatch.setattr(roofline, "measure_compute", lambda device, dtype: next(measured))
    monkeypatch.setattr(roofline, "measure_bandwidth", lambda device: 1e11)
    ceilings = roofline.Ceilings(torch.device("cpu"))
    cost = network_cost(72, 128)
    ms_at = {share: 1e3 * cost.flops / (share * 2e12) for share in (0.75, 1.5)}
    row = roofline.roofline_columns(cost, 1, "fp32", ms_at[0.75], ceilings)
    assert row["ceiling_tflops"] == 2.0 and row["flop_share"] == pytest.approx(0.75)
    row = roofline.roofline_columns(cost, 1, "fp32", ms_at[0.75], ceilings)  # no new measure
    assert row["ceiling_tflops"] == 2.0
    row = roofline.roofline_columns(cost, 1, "fp32", ms_at[1.5], ceilings)  # 3 TFLOP/s
    assert row["ceiling_tflops"] == 2.5 and row["flop_share"] == pytest.approx(1.2)


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x64", "conv"),
        ("void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>", "batch_norm"),
        ("void at::native::batch_norm_transform_input_kernel<float>", "batch_norm"),
        ("triton_poi_fused__native_batch_norm_legit_no_training_relu_3", "elementwise"),
        ("triton_tem_fused_convolution_relu_0", "conv"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
            "elementwise",
        ),
        ("void cudnn::engines_precompiled::nchwToNhwcKernel<__half>", "copy"),
        ("Memcpy DtoD (Device -> Device)", "copy"),
        ("ampere_sgemm_32x32_sliced1x4_tn", "gemm"),
        ("aten::mkldnn_convolution", "conv"),
        ("aten::native_batch_norm", "batch_norm"),
        ("aten::addmm", "gemm"),
        ("aten::relu_", "elementwise"),
        ("aten::_to_copy", "copy"),
        ("aten::empty", "other"),
    ],
)
def test_classify(name: str, category: str) -> None:
    assert classify(name) == category


def _event(name: str, us: float, device: bool = True) -> SimpleNamespace:
    return SimpleNamespace(
        name=name,
        device_type=DeviceType.CUDA if device else DeviceType.CPU,
        time_range=SimpleNamespace(start=100.0, end=100.0 + us),
        is_async=False,
    )


def test_cuda_profile_summary_without_a_gpu() -> None:
    """The CUDA branch of the profiler summary, fed kineto-like events (2 calls)."""
    events = [
        _event("sm90_xmma_fprop_implicit_gemm_f16f16", 300.0),
        _event("sm90_xmma_fprop_implicit_gemm_f16f16", 300.0),
        _event("triton_poi_fused_add_relu_0", 50.0),
        _event("triton_poi_fused_add_relu_0", 50.0),
        _event("Memcpy DtoD (Device -> Device)", 10.0),
        _event("cudaLaunchKernel", 5.0, device=False),  # CPU-side runtime call: not a kernel
    ]
    summary = _cuda_summary(events, calls=2)
    assert summary["kernels_per_call"] == 2  # conv + Triton; the memcpy is not a kernel
    assert summary["prof_conv_ms"] == pytest.approx(0.3)
    assert summary["prof_elementwise_ms"] == pytest.approx(0.05)
    assert summary["prof_copy_ms"] == pytest.approx(0.005) and summary["prof_copy_n"] == 0.5


class _CachedEager(EagerBackend):
    """A real eager backend that keeps a file in its cache directory, like compiled ones."""

    def __init__(self, model: torch.nn.Module, device: torch.device, cache_dir: Path) -> None:
        super().__init__(model, device)
        self.cache_dir = Path(cache_dir)

    def tuned(self, shape: tuple[int, ...]) -> str:
        """Like triton-*: what was tuned for this input shape."""
        return f"tuned for {shape}"

    def run(self, batch: torch.Tensor) -> torch.Tensor:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        (self.cache_dir / f"b{batch.shape[0]}").touch()
        return super().run(batch)


@pytest.fixture
def fake_cached_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = base.BackendSpec(
        FAKE,
        _CachedEager,
        "eager FP32 with a cache directory",
        base._always,
        frozenset({"fp32", "disk-cache"}),
    )
    monkeypatch.setitem(base._REGISTRY, FAKE, entry)


@pytest.fixture
def bench_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, "bench", ("ttball.cli.bench", "measure the backends"))


def _rows(path: Path) -> list[dict[str, Any]]:
    return json.loads((path / "bench.json").read_text())["rows"]


VARIANTS = "eager-fp32,eager-bf16,eager-fp16-autocast,folded-fp16-cl,cudagraph-fp32," + FAKE


def test_quick_bench_writes_every_report(
    tmp_path: Path, bench_command: None, fake_cached_backend: None
) -> None:
    out, cache = tmp_path / "out", tmp_path / "cache"
    rc = main(
        [
            "bench",
            "--quick",
            "--device",
            "cpu",
            "--size",
            "48x64",
            "--batch",
            "1,2",
            "--variants",
            VARIANTS,
            "--out",
            str(out),
            "--cache-dir",
            str(cache),
        ]
    )
    assert rc == 0
    rows = _rows(out)
    assert all(list(r) == list(ROW_KEYS) for r in rows)
    ok = [r for r in rows if r["status"] == "ok"]
    assert {(r["variant"], r["batch"]) for r in ok} == {
        (v, b) for v in VARIANTS.split(",") if v != "cudagraph-fp32" for b in (1, 2)
    }
    for r in ok:
        assert r["within_tolerance"], f"{r['variant']}: rel err {r['rel_err']:.2e}"
        assert r["min_ms"] <= r["median_ms"] <= r["max_ms"]
        assert r["frames_per_s"] == pytest.approx(3 * r["windows_per_s"])
        assert r["first_call_s"] > 0 and r["prof_conv_n"] == 72
        assert 0 < r["flop_share"] and 0 < r["bw_share"] and r["floor_ms"] > 0
        assert r["peak_mem_mb"] is None or r["peak_mem_mb"] >= 0
    by = {(r["variant"], r["batch"]): r for r in ok}
    assert by[("eager-fp32", 1)]["speedup_vs_eager_fp32"] == pytest.approx(1.0)
    assert by[("folded-fp16-cl", 1)]["same_precision_ref"] == "eager-fp16"
    assert by[("eager-fp16-autocast", 1)]["speedup_vs_same_precision"] == pytest.approx(1.0)
    assert by[("folded-fp16-cl", 1)]["prof_batch_norm_n"] == 0
    assert by[("eager-fp32", 1)]["prof_batch_norm_n"] == 71
    fake = by[(FAKE, 1)]
    assert fake["cache"] == "cold" and fake["first_call_warm_s"] > 0
    assert fake["tuned"] == "tuned for (1, 9, 48, 64)" and by[("eager-fp32", 1)]["tuned"] is None
    assert (cache / FAKE / "b2").is_file()
    (skipped,) = [r for r in rows if r["status"] != "ok"]
    assert skipped["variant"] == "cudagraph-fp32" and skipped["status"] == "unavailable"
    assert "CUDA" in skipped["reason"]

    with open(out / "bench.csv", newline="") as f:
        assert tuple(next(csv.reader(f))) == ROW_KEYS
    md = (out / "bench.md").read_text()
    assert "Command: `ttball bench" in md and "| variant | batch | median ms" in md
    assert "torch " + torch.__version__ in md and "cudagraph-fp32" in md
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_profilers_own_log_lines_stay_out_of_the_output(tmp_path: Path) -> None:
    """Kineto prints "USDT: ... profiler_start" / "profiler_stop" to the process's stderr for
    every profiled call (torch 2.13); the CLI sets KINETO_LOG_LEVEL unless the user did. In a
    process of its own: the level is read when the first profiler starts."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-m", "ttball", "bench", "--quick", "--device", "cpu",
                           "--size", "48x64", "--batch", "1", "--variants", "eager-fp32",
                           "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / "bench.json").exists()
    noise = [line for line in done.stderr.splitlines() if "SyncActivityProfilerHandler" in line]
    assert noise == []


def test_unknown_variant_is_a_user_error(
    bench_command: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--quick", "--device", "cpu", "--variants", "nope"]) == 2
    assert "no backend matches 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("variants", [",", ",,", "", " , "])
def test_variants_without_a_name_is_a_user_error(
    tmp_path: Path, bench_command: None, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, variants: str
) -> None:
    """``--variants ,,`` (or "") ran every variant, as if the option were left out."""
    def every_variant(*args: object, **kwargs: object) -> None:
        raise AssertionError("ran the variants")

    monkeypatch.setattr("ttball.bench.run_bench", every_variant)
    out = tmp_path / "b"
    assert main(["bench", "--quick", "--device", "cpu", "--variants", variants,
                 "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        "ttball bench: error: --variants needs at least one backend name or pattern "
        "(leave it out for all)")
    assert not out.exists()


def test_bad_batch_is_a_user_error(bench_command: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--device", "cpu", "--batch", "1,two"]) == 2
    assert "--batch" in capsys.readouterr().err


def test_verify_adds_ball_agreement_columns(tmp_path: Path, bench_command: None) -> None:
    from ttball.model import load_model, save_checkpoint

    small = load_model().config.evolve(name="shipped-144x256", input_height=144, input_width=256)
    weights = tmp_path / "w.safetensors"
    # the trained weights, run at 144x256: at 72x128 the clips' ball is too small for them
    save_checkpoint(weights, load_model(), small)
    out = tmp_path / "out"
    argv = ["bench", "--quick", "--device", "cpu", "--size", "144x256", "--no-profile",
            "--variants", "eager-fp32,folded-fp32", "--weights", str(weights), "--verify",
            "--out", str(out)]
    assert main(argv) == 0
    rows = {r["variant"]: r for r in _rows(out)}
    for name in ("eager-fp32", "folded-fp32"):
        assert rows[name]["verify_flips"] == 0
        assert rows[name]["verify_compared"] > 0
        assert rows[name]["verify_p99_px"] < 0.01
        assert rows[name]["verify_passed"] is True
    assert "| flips | p99 px | verified |" in (out / "bench.md").read_text()


class _KilledAtBatch3(EagerBackend):
    """Eager FP32 until a batch of 3 arrives: then the run ends as if its time limit killed it."""

    def run(self, batch: torch.Tensor) -> torch.Tensor:
        if batch.shape[0] == 3:
            raise KeyboardInterrupt
        return super().run(batch)


def test_a_run_cut_short_keeps_every_batch_size_measured(
    tmp_path: Path, bench_command: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # max-autotune compiles for minutes per batch size: a run killed during batch 3 must keep
    # batches 1 and 2 of the variant it was in, not only the variants that finished before it
    name = "test-killed-fp32"
    entry = base.BackendSpec(name, _KilledAtBatch3, "killed", base._always, frozenset({"fp32"}))
    monkeypatch.setitem(base._REGISTRY, name, entry)
    out = tmp_path / "out"
    argv = ["bench", "--quick", "--device", "cpu", "--size", "48x64", "--no-profile",
            "--batch", "1,2,3", "--variants", f"eager-fp32,{name}", "--out", str(out)]
    assert main(argv) != 0
    saved = json.loads((out / "bench.json").read_text())
    assert saved["meta"]["partial"] is True
    got = [(r["variant"], r["batch"], r["status"]) for r in saved["rows"]]
    assert got == [("eager-fp32", b, "ok") for b in (1, 2, 3)] + [(name, b, "ok") for b in (1, 2)]
    assert saved["rows"][4]["speedup_vs_eager_fp32"] > 0
    assert f"| {name} | 2 |" in (out / "bench.md").read_text()

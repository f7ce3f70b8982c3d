"""ttball.lab.fusion and ``ttball fusion`` on small sizes. One torch.compile of a 4,096-element
chain is shared by every test (dynamo reuses it for the same shape); the cold/warm cache probe
compiles twice more in fresh processes and is marked slow."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict

import pytest
import torch

from ttball.cli import fusion as cli
from ttball.errors import BackendUnavailable, UserError
from ttball.lab import fusion as fu
from ttball.passes.fold_bn import fold_conv_bn

CPU = torch.device("cpu")
CHAIN_NUMEL = 4096
SMALL = fu.FusionSizes(conv_in=4, conv_out=8, height=12, width=20, chain_numel=CHAIN_NUMEL,
                       add_calls=20, add_slice=64)
# A CLI scale giving the same chain length, so that the CLI test reuses the compiled chain.
CLI_SCALE = CHAIN_NUMEL / 2**24


@pytest.fixture(scope="module")
def report() -> fu.FusionReport:
    return fu.run_fusion(SMALL, repeats=2, compile_cache=False, min_sample_s=0.002)


def _relative_max_diff(ref: torch.Tensor, out: torch.Tensor) -> float:
    return ((ref - out).abs().max() / ref.abs().max()).item()


# ---------------------------------------------------------------- folding


def test_folded_conv_matches_conv_bn() -> None:
    model = fu.make_conv_bn(SMALL, CPU)
    folded = fold_conv_bn(model[0], model[1])
    x = torch.randn(2, SMALL.conv_in, SMALL.height, SMALL.width)
    with torch.no_grad():
        ref, out, bare = model(x), folded(x), model[0](x)
    assert _relative_max_diff(ref, out) < 1e-5
    # BN does real work here, so a fold that dropped it would fail the check above.
    assert _relative_max_diff(ref, bare) > 0.1


def test_fold_keeps_conv_bias_stride_and_groups() -> None:
    conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2, bias=True)
    bn = torch.nn.BatchNorm2d(6)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.01, 0.1)  # small: ε = 1e-5 matters at 1e-4 relative
        bn.weight.uniform_(0.5, 2)
        bn.bias.uniform_(-1, 1)
    bn.eval()
    x = torch.randn(1, 4, 9, 11)
    with torch.no_grad():
        ref, out = bn(conv(x)), fold_conv_bn(conv, bn)(x)
    assert out.shape == ref.shape == (1, 6, 5, 6)
    assert _relative_max_diff(ref, out) < 1e-5


def test_fold_refuses_training_mode_bn() -> None:
    with pytest.raises(ValueError, match="eval mode"):
        fold_conv_bn(torch.nn.Conv2d(2, 2, 1), torch.nn.BatchNorm2d(2).train())


# ---------------------------------------------------------------- chain and timing


def test_inplace_and_compiled_chains_equal_eager_exactly() -> None:
    with torch.inference_mode():
        x = fu.chain_input(CHAIN_NUMEL, CPU)
        ref = fu.chain(x)
        expected = torch.relu(x * 1.5 + 0.5) * 0.9
        assert torch.equal(ref, expected)
        assert torch.equal(fu.chain_inplace(x), ref)
        assert torch.equal(fu.compiled_chain()(x), ref)
        assert (ref > 0).any() and (ref == 0).any()  # relu clips something


def test_bytes_moved_counts_each_pass_read_and_write() -> None:
    assert fu.bytes_moved("eager", 2**24) == 4 * 2 * 2**24 * 4
    assert fu.bytes_moved("inplace", 10) == fu.bytes_moved("eager", 10)
    assert fu.bytes_moved("compiled", 10, itemsize=2) == 2 * 10 * 2


def test_measure_reports_milliseconds_per_call() -> None:
    calls = []

    def sleep_2ms() -> None:
        calls.append(1)
        time.sleep(0.002)

    t = fu.measure(sleep_2ms, CPU, repeats=3, min_sample_s=0.01)
    assert 2.0 <= t.min_ms <= t.median_ms <= t.max_ms < 50
    assert t.calls_per_sample >= 2  # a 10 ms sample holds several 2 ms calls
    assert len(calls) == fu.WARMUP_CALLS + 1 + 3 * t.calls_per_sample


def test_per_call_overhead_subtracts_the_single_call() -> None:
    def timing(ms: float) -> fu.Timing:
        return fu.Timing(ms, ms, ms, 7, 1)

    r = fu.OverheadResult(calls=1000, slice_len=1024, one_call=timing(0.13), split=timing(0.88))
    assert r.per_call_us == pytest.approx(0.75)


# ---------------------------------------------------------------- the report


def test_report_fields_and_figures(report: fu.FusionReport) -> None:
    d = json.loads(json.dumps(report.to_dict()))
    assert {"date", "cpu", "torch", "threads", "device"} <= d["machine"].keys()
    assert d["machine"]["threads"] == 1 and d["machine"]["torch"] == torch.__version__
    assert d["sizes"] == asdict(SMALL) and d["seed_sizes"] is False
    assert d["experiments"]["compile_cache"] is None
    assert [r["key"] for r in d["figures"]] == [k for k, *_ in fu.FIGURES]
    missing = {r["key"] for r in d["figures"] if r["here"] is None and "net" not in r["key"]}
    assert missing == {"compile.cold_s", "compile.warm_s"}
    assert len(d["verdicts"]) == 6


def test_report_numbers_are_consistent(report: fu.FusionReport) -> None:
    f = report.figures()
    assert f["fold.max_rel_diff"] < 1e-5
    assert f["chain.max_abs_diff"] == 0 and f["chain.inplace_max_abs_diff"] == 0
    assert f["traffic.eager_mb"] == pytest.approx(8 * CHAIN_NUMEL * 4 / 1e6)
    assert f["traffic.compiled_mb"] == pytest.approx(2 * CHAIN_NUMEL * 4 / 1e6)
    assert f["traffic.compiled_gbps"] == pytest.approx(
        f["traffic.compiled_mb"] / report.chain.compiled.median_ms)
    assert f["chain.speedup"] == pytest.approx(
        report.chain.eager.median_ms / report.chain.compiled.median_ms)
    # 20 calls cost more than one call over the same 1,280 elements.
    assert report.overhead.split.median_ms > report.overhead.one_call.median_ms


def test_run_fusion_restores_thread_count() -> None:
    before = torch.get_num_threads()
    r = fu.run_fusion(SMALL, threads=2, repeats=1, compile_cache=False, min_sample_s=0.0)
    assert torch.get_num_threads() == before
    assert r.machine["threads"] == 2


def _figures(change: dict | None = None) -> dict:
    """The seed's figures with the few it lacks filled in, altered by ``change``, derived again."""
    base = {**fu.SEED, "fold.max_rel_diff": 1e-7, "chain.inplace_max_abs_diff": 0.0,
            "traffic.fresh_array_ms": 0.5, **(change or {})}
    del base["chain.speedup"]  # the article's rounding; recompute it from the times
    return fu.derive(base, fu.FusionSizes())


def test_seed_figures_satisfy_the_seed_conclusions() -> None:
    for sentence in fu.verdicts(_figures(), fu.FusionSizes()):
        assert "→ holds" in sentence, sentence


@pytest.mark.parametrize(
    ("change", "index"),
    [
        ({"fold.folded_ms": 4.0}, 0),  # folding saves 31%
        ({"fold.max_rel_diff": 1e-3}, 0),
        ({"chain.max_abs_diff": 1e-3}, 1),
        ({"chain.compiled_ms": 6.0}, 1),  # 1.6×
        ({"chain.inplace_ms": 3.0}, 2),
        ({"compile.warm_s": 5.0}, 3),
        ({"overhead.split_ms": 0.2}, 4),
        ({"chain.compiled_ms": 0.5}, 5),  # compiled at 4.8× eager's bandwidth
    ],
)
def test_verdicts_follow_the_numbers(change: dict, index: int) -> None:
    assert "→ does not hold" in fu.verdicts(_figures(change), fu.FusionSizes())[index]


def test_cache_verdict_without_probe() -> None:
    f = _figures({"compile.cold_s": None, "compile.warm_s": None})
    assert "not measured" in fu.cache_verdict(f, fu.seed_figures())


@pytest.mark.slow
def test_compile_cache_probe_starts_cold_then_warm() -> None:
    r = fu.compile_cache_experiment(1024, CPU, threads=1)
    assert r.cold_files_before == 0 and r.warm_files_before > 0
    assert 0 < r.warm_s < r.cold_s


# ---------------------------------------------------------------- the CLI


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_cli_writes_json_and_markdown(tmp_path, capsys) -> None:
    out = tmp_path / "res"
    args = _args("--scale", str(CLI_SCALE), "--repeats", "1", "--no-compile-cache",
                 "--out", str(out))
    assert cli.run(args) == 0
    data = json.loads((out / "fusion.json").read_text())
    assert data["command"].startswith("ttball fusion --device cpu --threads 1 --repeats 1")
    assert data["sizes"]["chain_numel"] == CHAIN_NUMEL
    md = (out / "fusion.md").read_text()
    assert "| experiment | figure | this machine | seed | here / seed |" in md
    assert md.count("\n| ") == len(fu.FIGURES) + 1
    assert data["machine"]["cpu"] in md
    printed = capsys.readouterr().out
    assert "4.77e-06" in printed
    verdicts = [line for line in printed.splitlines() if line[:2] in {"1.", "2.", "3.", "4."}]
    assert len(verdicts) == 6 and "not measured" in verdicts.pop(3)
    assert all(("→ holds" in v) != ("→ does not hold" in v) for v in verdicts)
    assert sorted(p.name for p in out.iterdir()) == ["fusion.json", "fusion.md"]


@pytest.mark.parametrize(
    "argv",
    [("--repeats", "0"), ("--threads", "0"), ("--scale", "0"), ("--scale", "nan")],
)
def test_cli_rejects_bad_numbers(argv: tuple[str, ...]) -> None:
    with pytest.raises(UserError):
        cli.run(_args(*argv))


def test_cli_rejects_out_that_is_a_file(tmp_path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(UserError, match="--out"):
        cli.run(_args("--scale", str(CLI_SCALE), "--out", str(target)))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cli_cuda_without_gpu_is_a_user_error() -> None:
    with pytest.raises(BackendUnavailable, match="CUDA"):
        cli.run(_args("--device", "cuda"))


def test_cli_module_does_not_import_torch() -> None:
    code = "import sys, ttball.cli.fusion; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"

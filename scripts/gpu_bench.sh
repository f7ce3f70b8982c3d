#!/usr/bin/env bash
# The GPU tables of `ttball bench` on one H200, in steps that fit one 10-minute device call.
#
# Usage (GPU machine, repo root):  OUT=/some/dir bash scripts/gpu_bench.sh [GROUP|STEP ...]
#   default (no argument) = latency graphs compile sweep           ~9.5 min: the first call
#   more                  = compile_rest autotune64                ~9 min: a second call
#   extra                 = autotune1 autotune_nocg onnx           ~9.5 min: a third call
#   or any steps by name, e.g. graphs versus sweep                   ~9 min
# (BUDGET_S=570 for the default group.)
# Each step writes $OUT/<step>/bench.{json,csv,md,png} and $OUT/<step>.log; bench.json/csv are
# rewritten after every variant, so a step stopped by its time limit keeps what it measured.
# Steps never stop the script: a failed or timed-out step is reported and the next one runs.
# Wall-time control: the whole call stops starting steps after BUDGET_S seconds (default 530);
# each step gets min(its share, what is left), passes `--time-budget` (no new variant after it)
# and runs under `timeout` (hard stop). Elapsed time is printed per step.
#
# DEVICE=cpu (with PATH=.venv/bin:$PATH) runs the same steps on the CPU: a smoke test of the
# script only, since full-size CPU calls take ~0.7 s each and the steps run out of time.
# Estimates behind the shares (H200 baseline, 2026-11-30): eager calls 4-20 ms at batch 1-3;
# torch.compile first call 9-25 s per batch size (default / reduce-overhead), max-autotune
# 106-134 s per batch size, so max-autotune runs at batch 1 (default) and 64 (`more`) only.
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:?set OUT to the output directory}"
BUDGET_S="${BUDGET_S:-530}"
mkdir -p "$OUT"
T0=$(date +%s)
KEEP_CACHE="${CACHE:-}"  # CACHE=DIR keeps the compile caches (e.g. for a later verify); it must be empty
CACHE="${CACHE:-$(mktemp -d)}"  # fresh compile caches: first calls are cold, second instances warm
mkdir -p "$CACHE"
now() { echo $(( $(date +%s) - T0 )); }
say() { echo "== [$(now)s] $*"; }

# step NAME SHARE_S ARGS...: one `ttball bench` run under a time limit
step() {
  local name="$1" share="$2"; shift 2
  local left=$(( BUDGET_S - $(now) - 5 ))
  local limit=$(( share < left ? share : left ))
  if [ "$limit" -lt 60 ]; then
    say "$name: skipped, ${left}s left of ${BUDGET_S}s"
    return 0
  fi
  local start=$(now)
  say "$name: start (limit ${limit}s)"
  timeout -k 10 "$limit" python3 -m ttball.cli bench --device "${DEVICE:-cuda}" --out "$OUT/$name" \
    --cache-dir "$CACHE/$name" --time-budget $(( limit - 45 )) "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  grep -v '^USDT' "$OUT/$name.log" | tail -n 60
  say "$name: rc=$rc after $(( $(now) - start ))s$([ $rc -eq 124 ] && echo ' (time limit: partial results kept)')"
  return 0
}

# Latency, batch 1-3, the eager variants: 10 warm-up calls, 5 groups of 20 (not the seed's
# 20 + 5x50, to fit ~14 variants x 3 sizes; group means of 20 CUDA-event-timed calls).
# Measured 2026-11-30: ~7 s per eager variant, so 14 need ~100 s plus the ceilings.
latency() {
  step latency 170 --batch 1,2,3 --warmup 10 --groups 5 --calls 20 --variants 'eager-*'
}

# Latency, batch 1-3: BN folded, plain CUDA graphs, our Triton kernels, TensorRT (when present).
graphs() {
  step graphs 150 --batch 1,2,3 --warmup 10 --groups 5 --calls 20 \
    --variants 'folded-*,cudagraph-*,triton-*,tensorrt-*'
}

# ONNX Runtime (CPU-only on the GPU machine; its CUDA/TensorRT providers when installed).
onnx() {
  step onnx 120 --batch 1 --warmup 3 --groups 3 --calls 5 --variants 'onnxrt-*'
}

# torch.compile, batch 1-3: the baseline's best recipe, then the seed's four rows.
compile() {
  step compile 150 --batch 1,2,3 --warmup 10 --groups 5 --calls 20 --variants \
    compile-reduce-overhead-fp16-folded-cl,compile-reduce-overhead-fp16-autocast,compile-default-fp16-autocast,compile-reduce-overhead-fp32,compile-default-fp32
}

# Throughput, batch 8-64, for the main variants (fewer calls: batch 64 eager FP32 is ~220 ms;
# the compiled variant compiles once per batch size, ~12 s each).
sweep() {
  step sweep 210 --batch 8,16,32,64 --warmup 3 --groups 3 --calls 5 --no-warm --variants \
    eager-fp32,folded-fp16-cl,cudagraph-fp16-folded-cl,triton-fp16,compile-reduce-overhead-fp16-folded-cl
}

# Issue 9: ttball's Triton kernels beside torch.compile's best recipes and a plain CUDA graph of
# the same folded FP16 channels_last network, batch 1, in one run (max-autotune last: ~2 min).
versus() {
  step versus 330 --batch 1 --warmup 10 --groups 5 --calls 20 --variants \
    triton-fp16-direct,triton-fp16-branches,compile-reduce-overhead-fp16-folded-cl,compile-max-autotune-fp16-folded-cl
}

# The direct kernels beside every torch.compile recipe that compiles within the call, batch 1,
# one run: all but the three max-autotune-no-cudagraphs ones (2.5-5 min of cold compile each,
# h200.md). About 450 s cold: ~10-25 s of compile for each default/reduce-overhead recipe,
# ~155 s for max-autotune.
versus_all() {
  step versus_all 570 --batch 1 --warmup 10 --groups 5 --calls 20 --no-warm --variants \
    triton-fp16-direct,compile-reduce-overhead-fp16-folded-cl,compile-reduce-overhead-fp16-folded-cl-cudnnbench,compile-reduce-overhead-fp16,compile-reduce-overhead-fp16-autocast,compile-reduce-overhead-fp32,compile-default-fp16-folded-cl,compile-default-fp16,compile-default-fp16-autocast,compile-default-fp32-folded,compile-default-fp32,compile-max-autotune-fp16-folded-cl
}

# The same at batch 64: the direct kernels beside max-autotune (~2 min of autotuning) and the
# two other folded FP16 channels_last recipes (~20 s of compile each) in one run.
versus64() {
  step versus64 450 --batch 64 --warmup 3 --groups 3 --calls 5 --no-warm --variants \
    triton-fp16-direct,compile-reduce-overhead-fp16-folded-cl,compile-default-fp16-folded-cl,compile-max-autotune-fp16-folded-cl
}

# max-autotune (CUDA graphs), batch 1: ~2 min of autotuning, then the warm restart.
autotune1() {
  step autotune1 200 --batch 1 --warmup 10 --groups 5 --calls 20 \
    --variants compile-max-autotune-fp16-folded-cl
}

# The other compile combinations, batch 1-3.
compile_rest() {
  step compile_rest 300 --batch 1,2,3 --warmup 10 --groups 5 --calls 20 --variants \
    compile-default-fp16-folded-cl,compile-reduce-overhead-fp16,compile-reduce-overhead-fp16-folded-cl-cudnnbench,compile-default-fp16,compile-default-fp32-folded
}

# max-autotune at batch 64 (throughput end of the sweep).
autotune64() {
  step autotune64 220 --batch 64 --warmup 3 --groups 3 --calls 5 \
    --variants compile-max-autotune-fp16-folded-cl
}

# max-autotune (CUDA graphs) at batch 2 and 3: ~2 min of autotuning each, then the warm restarts.
autotune23() {
  step autotune23 330 --batch 2,3 --warmup 10 --groups 5 --calls 20 \
    --variants compile-max-autotune-fp16-folded-cl
}

# The Triton kernels launched one by one (no CUDA graph), batch 1-3: the launch cost the graph saves.
nograph() {
  step nograph 150 --batch 1,2,3 --warmup 10 --groups 5 --calls 20 --variants triton-fp16-nograph,triton-fp16
}

# Our Triton kernels with the tuner timing each candidate's device work (eighth session;
# triton-h200.md, "Sixth step"), batch 1, 8 and 64, each shape tuned cold.
tuner() {
  step tuner 240 --batch 1,8,64 --warmup 10 --groups 5 --calls 20 --no-warm \
    --variants triton-fp16,triton-fp16-pdl
}

# HRNet's branches side by side on CUDA streams (triton-fp16-branches, eighth session;
# triton-h200.md, "Seventh step") beside triton-fp16 and -pdl, batch 1, 2, 8 and 64.
branches() {
  step branches 300 --batch 1,2,8,64 --warmup 10 --groups 5 --calls 20 --no-warm \
    --variants triton-fp16,triton-fp16-pdl,triton-fp16-branches
}

# Issue 9, eighth step: the CUDA direct kernel among the tuner's candidates, beside the branches
# schedule without it, each tuned cold (the first direct candidate builds the extension: ~1 min).
direct() {
  step direct 330 --batch 1,8,64 --warmup 10 --groups 5 --calls 20 --no-warm \
    --variants triton-fp16-branches,triton-fp16-direct
}

# Programmatic dependent launch (triton-fp16-pdl) beside the same kernels without it, batch 1-3
# and 8, 64, in one run (triton-h200.md, "Third step"). Each tunes every shape cold.
pdl() {
  step pdl 400 --batch 1,2,3,8,64 --warmup 10 --groups 5 --calls 20 --no-warm \
    --variants triton-fp16,triton-fp16-pdl
}

# TMA candidates (triton-fp16-tma) and the row-walking kernel (triton-fp16-rows) in the tuner,
# beside triton-fp16, batch 1, 8, 64, in one run (triton-h200.md, "Fourth and fifth steps").
# Each tunes every shape cold.
tma() {
  step tma 420 --batch 1,8,64 --warmup 10 --groups 5 --calls 20 --no-warm \
    --variants triton-fp16,triton-fp16-tma,triton-fp16-rows
}

# The other two max-autotune-no-cudagraphs rows, batch 1 (~2 min of autotuning each).
autotune_nocg_rest() {
  step autotune_nocg_rest 330 --batch 1 --warmup 10 --groups 5 --calls 20 --no-warm --variants \
    compile-max-autotune-no-cudagraphs-fp16-autocast,compile-max-autotune-no-cudagraphs-fp32
}

# The no-cudagraphs max-autotune rows still missing (fifth session): FP32 at batch 1-3 (its cold
# compile took over 160 s at batch 1), the two FP16 ones at batch 2 and 3 (~150 s each).
nocg_fp32() {
  step nocg_fp32 570 --batch 1,2,3 --warmup 10 --groups 5 --calls 20 --no-warm \
    --variants compile-max-autotune-no-cudagraphs-fp32
}
# The cells still missing after the sixth session (each cold compile 2.5-5 min).
nocg_fp32_23() {
  step nocg_fp32_23 570 --batch 2,3 --warmup 10 --groups 5 --calls 20 --no-warm \
    --variants compile-max-autotune-no-cudagraphs-fp32
}
nocg_fp32_3() {  # batch 3 alone: after batch 2's 304-s cold compile, nocg_fp32_23 ran out of time
  step nocg_fp32_3 570 --batch 3 --warmup 10 --groups 5 --calls 20 --no-warm \
    --variants compile-max-autotune-no-cudagraphs-fp32
}
nocg_autocast_23() {
  step nocg_autocast_23 570 --batch 2,3 --warmup 10 --groups 5 --calls 20 --no-warm \
    --variants compile-max-autotune-no-cudagraphs-fp16-autocast
}
nocg_fp16_23() {
  step nocg_fp16_23 570 --batch 2,3 --warmup 10 --groups 5 --calls 20 --no-warm --variants \
    compile-max-autotune-no-cudagraphs-fp16-folded-cl,compile-max-autotune-no-cudagraphs-fp16-autocast
}

# max-autotune without CUDA graphs (the seed's row), batch 1.
autotune_nocg() {
  step autotune_nocg 300 --batch 1 --warmup 10 --groups 5 --calls 20 --no-warm --variants \
    compile-max-autotune-no-cudagraphs-fp16-folded-cl,compile-max-autotune-no-cudagraphs-fp16-autocast
}

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
python3 -c "import tensorrt; print('tensorrt', tensorrt.__version__)" 2>/dev/null || echo "tensorrt: not installed"
nproc
python3 -m ttball.cli bench --list --device cuda 2>&1 | tail -n 50

[ $# -eq 0 ] && set -- default
for arg in "$@"; do
  case "$arg" in
    default) latency; graphs; compile; sweep ;;
    more) compile_rest; autotune64 ;;
    extra) autotune1; autotune_nocg; onnx ;;
    latency|graphs|versus|versus64|versus_all|onnx|compile|sweep|autotune1|compile_rest|autotune64|autotune_nocg|autotune23|nograph|autotune_nocg_rest|nocg_fp32|nocg_fp16_23|nocg_fp32_23|nocg_fp32_3|nocg_autocast_23|pdl|tma|tuner|branches|direct) "$arg" ;;
    *) say "unknown step $arg (steps: latency graphs versus versus64 versus_all onnx compile sweep autotune1 compile_rest autotune64 autotune_nocg autotune23 nograph autotune_nocg_rest nocg_fp32 nocg_fp16_23 nocg_fp32_23 nocg_fp32_3 nocg_autocast_23 pdl tma tuner branches direct)" ;;
  esac
done

# One Markdown file with every step's table.
for md in "$OUT"/*/bench.md; do
  [ -f "$md" ] && { cat "$md"; echo; }
done > "$OUT/gpu-bench.md"
[ -z "$KEEP_CACHE" ] && rm -rf "$CACHE"
say "done: $OUT/gpu-bench.md"

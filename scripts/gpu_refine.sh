#!/usr/bin/env bash
# Issue 9, batch 1, the contention between branches: what the tenth session built after its
# last device call, on one H200 in one call of under 10 minutes.
#   1. the GPU tests of the kernels (the conv kernel's tile code in one function with an
#      optional loop over tiles, Config.programs; refine; the direct kernel); stops on a failure;
#   2. branches beside branches+refined at batch 1 and 2 (refine now also offers side-branch
#      steps on a quarter and half of the SMs), printing what refine changed;
#   3. if time is left, ttball bench of the two at batch 1, 2 and 8.
# Usage (GPU machine, repo root): OUT=/some/dir BUDGET_S=560 bash scripts/gpu_refine.sh
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
source scripts/_loadtest.sh  # start_budget, say, left
start_budget 560

say "GPU tests of tests/kernels"
timeout -k 10 "$(( $(left) < 240 ? $(left) : 240 ))" python3 -m pytest -q -m gpu \
  -p no:cacheprovider tests/kernels > "$OUT/tests.log" 2>&1
rc=$?
tail -n 30 "$OUT/tests.log"
if [ "$rc" -ne 0 ]; then
  say "tests failed (rc=$rc): stop"
  exit 1
fi

share=$(( $(left) * 2 / 3 ))
say "branches A/B (limit ${share}s)"
timeout -k 10 "$share" python3 scripts/gpu_branches_ab.py --batches 1,2 \
  --variants branches,branches+refined --out "$OUT/refine-ab.json" > "$OUT/refine-ab.log" 2>&1
say "branches A/B: rc=$?"
cat "$OUT/refine-ab.log"

if [ "$(left)" -gt 60 ]; then
  say "bench (limit $(left)s)"
  timeout -k 10 "$(left)" python3 -m ttball.cli bench --device cuda --out "$OUT/bench" \
    --time-budget $(( $(left) - 20 )) --batch 1,2,8 --warmup 10 --groups 5 --calls 20 \
    --variants triton-fp16-branches,triton-fp16-branches-refined > "$OUT/bench.log" 2>&1
  say "bench: rc=$?"
  cat "$OUT/bench/bench.md" 2>/dev/null | head -n 20
fi

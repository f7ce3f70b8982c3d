#!/usr/bin/env bash
# Issue 9, eighth step: the CUDA direct kernel (ttball/kernels/direct.py) on one H200, in one
# device call of under 10 minutes. Stops after the tests if they fail: timing a wrong kernel
# tells nothing.
#   1. its GPU tests (the first builds the extension with nvcc, about a minute); on a failure,
#      compute-sanitizer's memcheck on one case;
#   2. per conv shape it takes, at batch 1 and 64: every compiled tile, a block per tile and
#      pipelined, each whole and without its tensor-core work, beside the Triton kernels and
#      cuDNN, with its error against cuDNN (gpu_kernels.py --explore --direct-only);
#   3. the whole network in one process: serial, branches, branches+direct (with the residual
#      blocks' pair kernel) and branches+direct-nopair at batch 1, 8, 64.
# Usage (GPU machine, repo root): OUT=/some/dir BUDGET_S=560 bash scripts/gpu_direct.sh
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
source scripts/_loadtest.sh  # start_budget, say, left
start_budget 560

say "tests"
timeout -k 10 "$(left)" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_direct.py \
  > "$OUT/tests.log" 2>&1
rc=$?
tail -n 30 "$OUT/tests.log"
if [ "$rc" -ne 0 ]; then
  say "tests failed (rc=$rc): memcheck on one case, then stop"
  timeout -k 10 "$(( $(left) < 150 ? $(left) : 150 ))" compute-sanitizer --tool memcheck \
    python3 -m pytest -q -m gpu -p no:cacheprovider -x tests/kernels/test_direct.py \
    -k "test_pair_kernel_equals_the_two_convolutions and 16-tile0" \
    > "$OUT/memcheck.log" 2>&1
  tail -n 40 "$OUT/memcheck.log"
  exit 1
fi

share=$(( $(left) / 2 ))
say "direct shapes (limit ${share}s)"
timeout -k 10 "$share" python3 scripts/gpu_kernels.py --stages shapes --shape-batches 1,64 \
  --explore --direct-only --budget-s $(( share - 20 )) --out "$OUT/kernels-direct.json" \
  > "$OUT/kernels-direct.log" 2>&1
say "direct shapes: rc=$?"
grep -E "direct|b64|b1 " "$OUT/kernels-direct.log" | tail -n 80

say "network A/B (limit $(left)s)"
timeout -k 10 "$(left)" python3 scripts/gpu_branches_ab.py --batches 1,8,64 \
  --variants branches,branches+direct,branches+direct-nopair --out "$OUT/branches-direct-ab.json" \
  > "$OUT/branches-direct-ab.log" 2>&1
say "network A/B: rc=$?"
cat "$OUT/branches-direct-ab.log"

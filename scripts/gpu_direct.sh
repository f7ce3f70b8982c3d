#!/usr/bin/env bash
# Issue 9: the CUDA direct kernels (ttball/kernels/direct.py) on one H200, in one device call of
# under 10 minutes. Stops after the tests if they fail: timing a wrong kernel tells nothing.
#   1. their GPU tests (the first builds the library with nvcc);
#      on a failure, compute-sanitizer's memcheck on one case;
#   2. every step of the plan alone at batch 1 and 64 with its tuned configuration and every
#      candidate (gpu_kernels.py --stages steps: the stem's first convolution with the input
#      kernel among them); with SHAPES=1 instead, per conv shape the direct kernel takes, every
#      compiled tile whole and without its tensor-core work, beside Triton and cuDNN;
#   3. the whole network in one process at batch 1 and 64 (AB_BATCHES): serial, and -direct with
#      everything and without the stem's input kernel (AB_VARIANTS: any of
#      gpu_branches_ab.py's).
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
if [ "${SHAPES:-0}" = 1 ]; then
  say "direct shapes (limit ${share}s)"
  timeout -k 10 "$share" python3 scripts/gpu_kernels.py --stages shapes --shape-batches 1,64 \
    --explore --direct-only --budget-s $(( share - 20 )) --out "$OUT/kernels-direct.json" \
    > "$OUT/kernels-direct.log" 2>&1
  say "direct shapes: rc=$?"
  grep -E "direct|b64|b1 " "$OUT/kernels-direct.log" | tail -n 80
else
  say "steps alone (limit ${share}s)"
  timeout -k 10 "$share" python3 scripts/gpu_kernels.py --stages steps --shape-batches 1,64 \
    --budget-s $(( share - 20 )) --out "$OUT/kernels-steps.json" > "$OUT/kernels-steps.log" 2>&1
  say "steps: rc=$?"
  grep -E "batch|#0 |#1 |#5 " "$OUT/kernels-steps.log" | tail -n 40
fi

say "network A/B (limit $(left)s)"
timeout -k 10 "$(left)" python3 scripts/gpu_branches_ab.py --batches "${AB_BATCHES:-1,64}" \
  --variants "${AB_VARIANTS:-branches+direct,branches+direct-noinput}" \
  --out "$OUT/branches-direct-ab.json" \
  > "$OUT/branches-direct-ab.log" 2>&1
say "network A/B: rc=$?"
cat "$OUT/branches-direct-ab.log"

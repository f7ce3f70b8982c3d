#!/usr/bin/env bash
# Issue 9 (fourteenth session), one H200, one device call of under 10 minutes:
#   1. GPU tests of GraphCache's in-place graphs and of the Triton backends' parity;
#   2. the network A/B: triton-fp16-direct with graphs that read a reused input buffer in place
#      against the same with the copy into the static input (AB_BATCHES, default 1,64);
#   3. Nsight Compute on the stem's steps and the tails with upsampled 1x1 terms, with the
#      configurations -direct's tuner picks (NCU_STEPS, NCU_BATCHES), one CSV per batch size.
# Stops after the tests if they fail. Usage (GPU machine, repo root):
#   OUT=/some/dir BUDGET_S=560 bash scripts/gpu_profile_stem.sh
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
source scripts/_loadtest.sh  # start_budget, say, left
start_budget 560

say "tests"
gpu_tests 200 tests/backends/test_graph_cache.py tests/backends/test_backends.py \
  -k "graph_cache or parity_on_cuda" || { say "tests failed (rc=$?): stop"; exit 1; }

say "network A/B (limit 170s)"
timeout -k 10 170 python3 scripts/gpu_branches_ab.py --batches "${AB_BATCHES:-1,64}" \
  --variants branches+direct,branches+direct+copy --out "$OUT/inplace-ab.json" \
  > "$OUT/inplace-ab.log" 2>&1
say "A/B: rc=$?"
grep -E "^b=" "$OUT/inplace-ab.log"

for b in ${NCU_BATCHES:-64 1}; do
  say "ncu batch $b (limit $(( $(left) / 2 ))s)"
  timeout -k 10 "$(( $(left) / 2 ))" ncu --profile-from-start off --clock-control none \
    --set full --csv --page details python3 scripts/gpu_ncu.py --batch "$b" \
    --steps "${NCU_STEPS:-0,1,3,4,5,38,66}" --tma --rows --direct \
    > "$OUT/ncu-b$b.csv" 2> "$OUT/ncu-b$b.log"
  say "ncu b$b: rc=$?"
  grep -E "^step" "$OUT/ncu-b$b.log"
  gzip -f "$OUT/ncu-b$b.csv"
done
say "done"

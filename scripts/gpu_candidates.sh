#!/usr/bin/env bash
# Issue 9: new tuner candidates of triton-fp16-direct on one H200, in one device call of under
# 10 minutes (first run in the fifteenth session, for two candidates the fourteenth built
# without a GPU; then for the direct kernels with registers capped for three blocks an SM).
# Stops after the tests if they fail: timing a wrong kernel tells nothing.
#   1. the direct kernels' GPU tests (tests/kernels/test_direct.py; TESTS: other files);
#   2. the network A/B at batch 1 and 64 (AB_BATCHES) with the tuner's three best candidates of
#      SHOW_STEPS (default 0 and 5: the input kernel and transition1; SHOW_TOP of them, default
#      3) printed per variant (AB_VARIANTS, any of gpu_branches_ab.py's);
#   3. `ttball bench` of -branches and -direct at batch 1, 8 and 64 (gpu_bench.sh direct);
#   4. `ttball verify` of -direct on the synthetic clips and the real rally (carry .gpu).
# Everything is written to a scratch folder and comes back as $OUT/candidates.tgz (the device
# tool returns at most 8 files, 2 folders down), with the tests' log and the A/B's JSON beside.
# Usage (GPU machine, repo root): OUT=/some/dir BUDGET_S=560 bash scripts/gpu_candidates.sh
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
source scripts/_loadtest.sh  # start_budget, say, left
start_budget 560
DEST="$OUT"
OUT="$(mktemp -d)"
trap 'tar czf "$DEST/candidates.tgz" --exclude=images -C "$OUT" . 2>/dev/null;
      cp "$OUT/tests.log" "$OUT/candidates-ab.json" "$DEST/" 2>/dev/null' EXIT

say "tests"
gpu_tests 200 ${TESTS:-tests/kernels/test_direct.py} || { say "tests failed (rc=$?): stop"; exit 1; }

say "network A/B (limit 200s)"
timeout -k 10 200 python3 scripts/gpu_branches_ab.py --batches "${AB_BATCHES:-1,64}" \
  --variants "${AB_VARIANTS:-branches+direct}" --show-steps "${SHOW_STEPS:-0,5}" \
  --show-top "${SHOW_TOP:-3}" \
  --out "$OUT/candidates-ab.json" > "$OUT/candidates-ab.log" 2>&1
say "A/B: rc=$?"
grep -E "^b=" "$OUT/candidates-ab.log" | grep -v " pair "
gzip -f "$OUT/candidates-ab.log"

if [ "$(left)" -gt 120 ]; then
  say "bench (limit $(( $(left) - 60 ))s)"
  BUDGET_S=$(( $(left) - 60 )) OUT="$OUT/bench" bash scripts/gpu_bench.sh direct 2>&1 \
    | grep -E "^\| triton|^== "
fi
if [ "$(left)" -gt 50 ]; then
  say "verify (limit $(left)s)"
  SKIP_EAGER=1 SKIP_ONNX=1 COMPILE=triton-fp16-direct COMPILE_S=$(( $(left) - 15 )) \
    OUT="$OUT" BUDGET_S="$(left)" bash scripts/gpu_verify.sh > "$OUT/verify.log" 2>&1
  cat "$OUT/verify/SUMMARY.md" 2>/dev/null
fi
say "done"

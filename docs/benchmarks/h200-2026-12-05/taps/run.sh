#!/usr/bin/env bash
# Forty-second session, the last call: the tap-partials kernel for transition1's 128 -> 16
# (conv3x3_wgmma_taps_kernel, ttball/kernels/direct.cu) on one H200. Stops after its tests if
# they fail (memcheck on the kernel's test then): timing a wrong kernel tells nothing.
#   1. its GPU tests: the kernel against the float32 convolution, and in the backend through
#      graph capture and replay against triton-fp16 (the first builds the library with nvcc);
#   2. the network A/B in one process at batch 64 and 1 (scripts/gpu_branches_ab.py):
#      triton-fp16-direct as the tuner chooses with and without the kernel, step 5's four best
#      candidates in each;
#   3. ttball verify of triton-fp16-direct on the real rally (batch 1, as a live session).
# Usage (GPU machine, repo root): OUT=/some/dir BUDGET_S=520 bash docs/benchmarks/h200-2026-12-05/taps/run.sh
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/taps-tcache TTBALL_WGMMA_TAPS=1 \
  TTBALL_CACHE_DIR=/tmp/taps-ttball
source scripts/_loadtest.sh  # start_budget, say, left
start_budget 520

say "tests"
timeout -k 10 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rA \
  tests/kernels/test_direct.py -k "taps or (wgmma_conv_equals and 16-16-4x64-wg1)" \
  > "$OUT/tests.log" 2>&1
rc=$?
tail -n 15 "$OUT/tests.log"
if [ "$rc" -ne 0 ]; then
  say "tests failed (rc=$rc): memcheck on the kernel's test, then stop"
  timeout -k 10 "$(( $(left) < 150 ? $(left) : 150 ))" compute-sanitizer --tool memcheck \
    python3 -m pytest -q -m gpu -p no:cacheprovider -x tests/kernels/test_direct.py \
    -k "test_wgmma_taps_conv_equals" > "$OUT/memcheck.log" 2>&1
  tail -n 40 "$OUT/memcheck.log"
  exit 1
fi

share=$(( $(left) - 110 ))
say "network A/B (limit ${share}s)"
timeout -k 10 "$share" python3 scripts/gpu_branches_ab.py --batches 64,1 \
  --variants branches+direct,branches+direct-notaps --show-steps 5 --show-top 4 \
  --out "$OUT/taps-ab.json" > "$OUT/taps-ab.log" 2>&1
say "network A/B: rc=$?"
cat "$OUT/taps-ab.log"

say "verify (limit $(left)s)"
timeout -k 10 "$(left)" python3 -m ttball verify --backend triton-fp16-direct \
  --device cuda --out "$OUT/verify" .gpu/real_rally_a.mp4 > "$OUT/verify.log" 2>&1
say "verify: rc=$?"
tail -n 20 "$OUT/verify.log"

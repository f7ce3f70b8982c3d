#!/usr/bin/env bash
# Forty-fifth session, first call (H200): the input kernel's TMA staging again, its box now
# starting 4 columns left of the tile (16-byte aligned: the forty-fourth session's box started
# 1 column left and its GPU test failed with "illegal instruction"); the A/B of steps 0, 1 and 5
# with the ten candidates that passed in the forty-fourth session plus the input's if it
# passes; then ttball verify of triton-fp16-direct as tuned with them (5 synthetic clips and
# the real rally), the gate before they leave UNTESTED. ~8 min; carry `.gpu`:
#   OUT=$OUT bash docs/benchmarks/h200-2026-12-05c/call1.sh > $OUT/call.log 2>&1
set -uo pipefail
: "${OUT:?set OUT}"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/c-tcache \
  TTBALL_CACHE_DIR=/tmp/c-ttball
TEN=128-16-14x14-wg2-taps,128-16-14x14-wg2-taps-tma,128-16-6x14-wg1-taps
TEN=$TEN,128-16-6x14-wg1-taps-tma,128-16-6x30-wg2-taps-tma,64-64-1x128-wg1-tma
TEN=$TEN,64-64-2x128-wg1-tma,64-64-2x128-wg2-tma,64-64-4x64-wg2-tma,64-64-6x64-wg3-tma
S=$(date +%s)
INPUT=$(TTBALL_DIRECT_NEXT=1 python3 scripts/gpu_candidate_tests.py -k "input_kernel" \
  --timeout 150 --log "$OUT/tests.log" 2> "$OUT/tests.txt")
cat "$OUT/tests.txt"
echo "tests $(( $(date +%s) - S )) s"
if [ -z "$INPUT" ]; then  # still failing: where, by compute-sanitizer if the machine has it
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -n "$CS" ] && TTBALL_DIRECT_NEXT=1 timeout -k 5 120 "$CS" --show-backtrace device \
    python3 -m pytest -q -m gpu -p no:cacheprovider -x tests/kernels/test_direct.py \
    -k "9-64-8x16-wg1-tma" > "$OUT/sanitizer.log" 2>&1
  grep -m 12 -E "=========|Error|error" "$OUT/sanitizer.log"
fi
NEXT=$TEN${INPUT:+,$INPUT}
echo "$NEXT" | tee "$OUT/next.txt" > /tmp/ttball-direct-next
S=$(date +%s)
TTBALL_DIRECT_NEXT="$NEXT" timeout -k 5 120 python3 scripts/gpu_branches_ab.py \
  --batches 64,1 --variants branches+direct --show-steps 0,1,5 --show-top 8 \
  --out "$OUT/ab.json" > "$OUT/ab.log" 2>&1
echo "A/B rc=$? $(( $(date +%s) - S )) s"
grep -E "step [015] |ms  \(rel" "$OUT/ab.log"
[ "${SKIP_VERIFY:-0}" = 1 ] && exit 0  # (short of device time: the tests and A/B only)
S=$(date +%s)
TTBALL_DIRECT_NEXT="$NEXT" SKIP_EAGER=1 SKIP_ONNX=1 COMPILE=triton-fp16-direct COMPILE_S=200 \
  BUDGET_S=230 OUT="$OUT" bash scripts/gpu_verify.sh > "$OUT/verify.log" 2>&1
echo "verify rc=$? $(( $(date +%s) - S )) s"
tail -n 12 "$OUT/verify.log"
cat "$OUT/verify/SUMMARY.md"

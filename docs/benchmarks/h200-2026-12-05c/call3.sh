#!/usr/bin/env bash
# Forty-fifth session, third call (H200): the tap partials summed in FP16 pairs
# (../h200-2026-12-05/next/fp16-sums.sh: its GPU tests, step 5's candidates in both trees,
# verify on the real rally), then the resize stage at 48 frames with each path's GPU time
# alone (scripts/gpu_e2e.py's gpu_rate) and runs() alone on the host: is the Triton resize's
# list path (4.25 us a frame against 1.13 stacked) bound by the host? ~6 min; carry `.gpu`:
#   OUT=$OUT bash docs/benchmarks/h200-2026-12-05c/call3.sh > $OUT/call.log 2>&1
set -uo pipefail
: "${OUT:?set OUT}"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
mkdir -p "$OUT/f16" "$OUT/resize"
S=$(date +%s)
OUT="$OUT/f16" timeout -k 5 330 bash docs/benchmarks/h200-2026-12-05/next/fp16-sums.sh \
  > "$OUT/f16/call.log" 2>&1
echo "fp16-sums rc=$? $(( $(date +%s) - S )) s"
cat "$OUT/f16/call.log"
S=$(date +%s)
TRITON_CACHE_DIR=/tmp/rz-tcache timeout -k 5 170 python3 scripts/gpu_e2e.py \
  --out "$OUT/resize/resize.json" --backend triton-fp16-direct --batches 16 \
  --stages frames,resize --budget-s 160 > "$OUT/resize/resize.log" 2>&1
echo "resize rc=$? $(( $(date +%s) - S )) s"
python3 docs/benchmarks/h200-2026-12-05/resize/summary.py "$OUT/resize/resize.json"

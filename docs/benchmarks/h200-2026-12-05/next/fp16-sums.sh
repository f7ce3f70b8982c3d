#!/usr/bin/env bash
# Prepared in the forty-second session (not run yet): the tap-partials kernel with its nine
# partials summed in FP16 pairs (HADD2) before the bias, fp16-sums.patch beside this file,
# applied to a copy of the tree. The SASS of the sm_90a build (scripts/sass_loops.py --patch):
# the sums' loop 211 -> 119 instructions an item, ~130 fewer a thread a tile of the ~1,190 (the
# kernel is issue-bound).
# A numerics change: its GPU tests (the float32 convolution, atol 2e-2), ttball verify on the
# real rally, and step 5's candidates timed by the tuner in both trees (all tap candidates
# offered that passed their tests, TTBALL_DIRECT_NEXT). ~4 min; carry `.gpu`:
#   OUT=$OUT bash docs/benchmarks/h200-2026-12-05/next/fp16-sums.sh > $OUT/call.log 2>&1
set -uo pipefail
# the candidates whose GPU tests passed in taps-tma/run.sh on this machine (all if it did not run)
export PYTHONUNBUFFERED=1 TTBALL_DIRECT_NEXT=$(cat /tmp/ttball-direct-next 2>/dev/null || echo 1)
REPO=$PWD HERE=docs/benchmarks/h200-2026-12-05/next
rm -rf /tmp/f16 && mkdir -p /tmp/f16 && cp -r ttball tests scripts pyproject.toml /tmp/f16/
(cd /tmp/f16 && patch -p1 < "$REPO/$HERE/fp16-sums.patch") || exit 1
(cd /tmp/f16 && PYTHONPATH=$PWD TTBALL_CACHE_DIR=/tmp/f16-cache timeout 90 python3 -m pytest -q \
  -m gpu -p no:cacheprovider tests/kernels/test_direct.py -k taps) > "$OUT/tests.log" 2>&1
rc=$?
tail -n 5 "$OUT/tests.log"
[ "$rc" -eq 0 ] || exit 1
for tree in "$REPO" /tmp/f16; do
  name=$([ "$tree" = /tmp/f16 ] && echo fp16 || echo main)
  (cd "$tree" && PYTHONPATH=$PWD TTBALL_CACHE_DIR=/tmp/f16-$name timeout 100 python3 \
    scripts/gpu_branches_ab.py --batches 64,1 --variants branches+direct --show-steps 5 \
    --show-top 8 --out "$OUT/ab-$name.json") > "$OUT/ab-$name.log" 2>&1
  echo "$name: rc=$?"; grep -E "step 5|ms  \(rel" "$OUT/ab-$name.log"
done
(cd /tmp/f16 && PYTHONPATH=$PWD TTBALL_CACHE_DIR=/tmp/f16-cache timeout 90 python3 -m ttball \
  verify --backend triton-fp16-direct --device cuda --out "$OUT/verify" \
  "$REPO/.gpu/real_rally_a.mp4") > "$OUT/verify.log" 2>&1
tail -n 4 "$OUT/verify.log"

#!/usr/bin/env bash
# Forty-third session (prepared; no device was lent that session): the resize as one Triton
# kernel (ttball/kernels/prepost_pixels.py, Resizer(mode="triton"), serve --pipeline-resize
# triton), bit-exact with the eager taps in Triton's interpreter on CPU; not yet run on a GPU.
#   1. its tests compiled on the GPU (every size and layout of the CPU's interpreter tests, and
#      the real size, 1280x720 -> 512x288, from two runs of a buffer in place);
#   2. scripts/gpu_e2e.py's resize stage at 48 frames (--batches 16): eager, compiled and the
#      kernel on a stacked batch, and each on the serving path's list of frames (`*_list`: two
#      runs as two decode children leave them; eager and compiled stack it first, the kernel
#      reads it in place); then those frames' windows normalised, eager against the lookup
#      kernel (prepost_pixels.Normalizer), each checked equal to the CPU's normalize.
#      Prediction in ../../LOG.md ("Forty-third session").
# A few minutes, no carry. Run: OUT=$OUT bash docs/benchmarks/h200-2026-12-05/resize/run.sh
# > $OUT/call.log 2>&1
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/rz-tcache
timeout -k 5 150 python3 -m pytest -q -p no:cacheprovider -rA \
  tests/kernels/test_prepost_pixels.py > "$OUT/tests.log" 2>&1
rc=$?
tail -n 5 "$OUT/tests.log"
[ "$rc" -eq 0 ] || exit 1
timeout -k 5 "${STAGE_S:-150}" python3 scripts/gpu_e2e.py --out "$OUT/resize.json" \
  --backend triton-fp16-direct --batches 16 --stages frames,resize \
  --budget-s $(( ${STAGE_S:-150} - 10 )) > "$OUT/resize.log" 2>&1
echo "stage rc=$?"
python3 docs/benchmarks/h200-2026-12-05/resize/summary.py "$OUT/resize.json"

#!/usr/bin/env bash
# Prepared in the forty-second session (its device time ran out before it; not run): the
# candidates whose GPU tests have not run (ttball.kernels.direct.UNTESTED: the tap-partials
# kernel's TMA halo, variant 4, its 6 x 14 tile of one warpgroup, two blocks an SM, and its
# 14 x 14 tile; the 64 -> 64 tiles' TMA halos, with the pixels as M and as N; and, added in
# the forty-fourth session, the input kernel's TMA staging for step 0) beside the measured ones, offered to the tuner here by TTBALL_DIRECT_NEXT (those that passed).
#   1. their GPU tests (the tap partials' and every TMA halo's; the library built first), by
#      scripts/gpu_candidate_tests.py: a test that fails runs again alone (a faulting kernel
#      breaks the CUDA context for the tests after it), and only the candidates whose tests all
#      passed are offered below (their ids in $OUT/next.txt and /tmp/ttball-direct-next, which
#      next/bench.sh and next/fp16-sums.sh read on the same machine);
#   2. scripts/gpu_branches_ab.py at batch 64 and 1, triton-fp16-direct as tuned: the network,
#      and steps 0's, 1's and 5's best candidates as the tuner timed them.
# Usage (GPU machine, repo root): OUT=/some/dir bash docs/benchmarks/h200-2026-12-05/taps-tma/run.sh
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tma-tcache \
  TTBALL_CACHE_DIR=/tmp/tma-ttball TTBALL_DIRECT_NEXT=1  # the tests' backend run offers all
NEXT=$(python3 scripts/gpu_candidate_tests.py -k "taps or tma" --timeout 150 \
  --log "$OUT/tests.log" 2> "$OUT/tests.txt")
cat "$OUT/tests.txt"
echo "$NEXT" | tee "$OUT/next.txt" > /tmp/ttball-direct-next
[ -n "$NEXT" ] || { echo "no candidate passed its tests: no A/B"; exit 1; }
TTBALL_DIRECT_NEXT="$NEXT" timeout -k 5 "${AB_S:-110}" python3 scripts/gpu_branches_ab.py \
  --batches 64,1 --variants branches+direct --show-steps 0,1,5 --show-top 8 \
  --out "$OUT/tma-ab.json" > "$OUT/tma-ab.log" 2>&1
echo "A/B rc=$?"
grep -E "step [015] |ms  \(rel" "$OUT/tma-ab.log"

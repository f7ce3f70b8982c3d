# For the next session (not run yet). The thirty-seventh session found a lane's cycle (~48-51 ms
# a push of ~45 frames, eight replicas of one lane) unmoved by where its wait sits, and a
# reading to test: the GPU's clients together get through ~50,000 operations a second (the
# profiled replica sends ~358 a push: the statistics' graph ~231 of them, 154 kernels a call
# at ~1.5 calls a push; the network's ~100), whatever their GPU time. One call: the new GPU
# tests (the window statistics as two Triton kernels, TTBALL_FUSED_WINDOWS=1; empty kernels a
# call, TTBALL_PAD_KERNELS); then eight of one at 320 sessions as they are, then with
# TTBALL_FUSED_WINDOWS=2 (the crops' gather, flood and window statistics in two Triton kernels:
# the statistics' graph ~154 -> ~20 kernels a call, ~358 -> ~160 operations a push; level 1,
# window statistics only, ~55 a call, runs in pad.sh). Chain next/pad.sh
# right after it (the machine stays warm 30 s; its caches then make every start warm).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=585 bash docs/benchmarks/h200-2026-12-04d/next/ops.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Thirty-seventh session").
TOTAL=${TOTAL:-585}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
PYTHONPATH=$PWD:/tmp/site timeout 80 python3 -m pytest -q -p no:cacheprovider -m gpu -rA \
  tests/kernels/test_prepost.py -k "fused_windows or serial_rows or matches_the_cpu" \
  > $OUT/tests.log 2>&1
PYTHONPATH=$PWD:/tmp/site timeout 60 python3 -m pytest -q -p no:cacheprovider -rA \
  tests/kernels/test_prepost_fused.py >> $OUT/tests.log 2>&1; t tests  # all of it, compiled
environ() {  # what the replicas were started with, read while they warm up
  ( sleep $1; for p in $(pgrep -f "ServeReplica"); do
      echo "$p $(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -E '^TTBALL_' | tr '\n' ' ')"
    done > $W/$2-environ.txt ) &
}
R base8 290 SESSIONS_8="320" $EIGHT
after base8
LEFT=$(left)
environ 60 win2
[ $LEFT -ge 130 ] && { R win2 $LEFT SESSIONS_8="320" $EIGHT TTBALL_FUSED_WINDOWS=2; after win2; }
cp $W/win2-environ.txt $OUT/ 2>/dev/null
# each level's GPU operations in one replay of the statistics' graph (~20 s with compiles)
[ $(left) -ge 40 ] && PYTHONPATH=$PWD:/tmp/site timeout 35 python3 scripts/stats_kernels.py \
  --out $OUT/stats-kernels.json > $OUT/stats-kernels.txt 2>&1
finish base8 win2

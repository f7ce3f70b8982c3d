# For the next session, chained right after next/busy2.sh on the same warm machine: half the
# padding (TTBALL_PAD_MATMULS=5, ~0.9 ms a replay alone), then as they are again (the drift
# between the two calls). With busy2.sh's two runs: throughput against GPU time added, three
# points. Then, with what time is left, the network alone at batch 8 and 16 (ttball bench).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=590 bash docs/benchmarks/h200-2026-12-04e/next/busy3.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Thirty-eighth session").
rm -rf /tmp/next  # busy2.sh's runs are in its own $OUT already; the caches stay
TOTAL=${TOTAL:-590}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
R busy5 200 SESSIONS_8="320" $EIGHT TTBALL_PAD_MATMULS=5
after busy5
LEFT=$(left)
[ $LEFT -ge 140 ] && { R again8 $LEFT SESSIONS_8="320" $EIGHT; after again8; }
# the network alone at the lanes' batch sizes (the prediction's ~4.3 ms at 16 is an estimate
# between batch 8 and 64), with the serve runs' compile cache
[ $(left) -ge 90 ] && PYTHONPATH=$PWD:/tmp/site timeout $(( $(left) - 15 )) python3 -m ttball.cli \
  bench --device cuda --variants triton-fp16-direct --batch 8,16 --no-profile --no-warm \
  --cache-dir /tmp/scache --out $W/bench16 > $W/bench16.log 2>&1
cp $W/bench16/bench.md $OUT/bench16.md 2>/dev/null || tail -20 $W/bench16.log > $OUT/bench16.md
finish busy5 again8
rm -f $OUT/times.log

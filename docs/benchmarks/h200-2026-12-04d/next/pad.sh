# For the next session, chained right after next/ops.sh on the same warm machine (its Triton
# and compile caches make both starts warm, ~85 s). Eight of one at 320 sessions with 100
# empty kernels after each call's statistics (TTBALL_PAD_KERNELS=100: ~150 operations a push
# more, ~0.3 ms of GPU time), then as they are again (the same call's baseline, and a second
# reading of ops.sh's base8 for the noise).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=400 bash docs/benchmarks/h200-2026-12-04d/next/pad.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Thirty-seventh session").
rm -rf /tmp/next  # ops.sh's runs are in its own $OUT already; the caches stay
TOTAL=${TOTAL:-400}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
EIGHT="REPLICAS=8 LANES=1 GPUS_PER_REPLICA=0.12 CPUS_PER_REPLICA=1.5 DECODE_PROCESSES=2 DECODE_AHEAD=1 BATCHES_AHEAD=1"
after() { python3 scripts/serve_push_costs.py $W/$1/ray >> $W/$1/stages.txt 2>&1; }
R pad8 200 SESSIONS_8="320" $EIGHT TTBALL_PAD_KERNELS=100
after pad8
LEFT=$(left)
[ $LEFT -ge 130 ] && { R again8 $LEFT SESSIONS_8="320" $EIGHT; after again8; }
finish pad8 again8

# For the next session (not run yet). The thirty-eighth session found the worker's pace not
# following its GPU operations (100 empty kernels more a call: no change; the GPU's front end
# took ~5.9 M kernels a second from 24 MPS clients, the worker sends ~50,000). The converse:
# GPU time with few operations. Eight of one at 320 sessions as they are (cold start, the
# same call's baseline), then with TTBALL_PAD_MATMULS=10 (ten half-precision 4096² products
# after each call's statistics, 1.878 ms a replay alone on an H200: ~2.8 ms of a whole GPU a
# push, ~0.4 s a second over eight replicas). Chain next/busy3.sh right after it.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=585 bash docs/benchmarks/h200-2026-12-04e/next/busy2.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Thirty-eighth session").
TOTAL=${TOTAL:-585}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
EIGHT="REPLICAS=8 LANES=1 GPUS_PER_REPLICA=0.12 CPUS_PER_REPLICA=1.5 DECODE_PROCESSES=2 DECODE_AHEAD=1 BATCHES_AHEAD=1"
after() { python3 scripts/serve_push_costs.py $W/$1/ray >> $W/$1/stages.txt 2>&1; }
R base8 300 SESSIONS_8="320" $EIGHT
after base8
LEFT=$(left)
[ $LEFT -ge 140 ] && { R busy10 $LEFT SESSIONS_8="320" $EIGHT TTBALL_PAD_MATMULS=10; after busy10; }
finish base8 busy10
rm -f $OUT/times.log

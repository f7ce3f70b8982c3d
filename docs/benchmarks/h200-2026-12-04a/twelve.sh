# Thirty-fourth session, call 3: twelve replicas of one lane (never measured: the thirty-first
# session's twelve lanes were six replicas of two, whose lanes waited on each other's lock; call
# 1's early12 had no time). Call 2 showed the GPU holds the decode (~10,000 frames/s) and the
# network (~3,000 windows/s) together, so eight lanes' ~6,700 frames/s would be their own
# chains' gaps; more lanes in flight fill them. --decode-early and --batches-ahead 1 as call 1.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=420 bash docs/benchmarks/h200-2026-12-04a/twelve.sh
# > $OUT/call.log 2>&1. Prediction in ../LOG.md ("Thirty-fourth session").
TOTAL=${TOTAL:-420}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
R twelve $(( TOTAL - 15 )) DECODE_EARLY=1 SESSIONS_12="320 384" REPLICAS=12 LANES=1 \
  GPUS_PER_REPLICA=0.08 CPUS_PER_REPLICA=1 DECODE_PROCESSES=2 DECODE_AHEAD=1 BATCHES_AHEAD=1
finish twelve

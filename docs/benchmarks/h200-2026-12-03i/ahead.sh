# Thirty-third session, call 2: --batches-ahead 1 against 0 on eight replicas of one lane (call
# 1: 6,440 / 6,642 frames/s at 256 / 320 with the lanes 77 % of their time in pushes, the rest
# waiting for the event loop to answer a batch before the next was handed over). In one call:
# ahead on eight of one at 256 / 320 (cold Triton cache), the same without at 256 (warm), then
# ahead on twelve of one at 320 with what is left.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=580 bash docs/benchmarks/h200-2026-12-03i/ahead.sh
# > $OUT/call.log 2>&1. Prediction in ../LOG.md ("Thirty-third session").
TOTAL=${TOTAL:-580}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
EIGHT="REPLICAS=8 LANES=1 GPUS_PER_REPLICA=0.12 CPUS_PER_REPLICA=1.5 DECODE_PROCESSES=2 DECODE_AHEAD=1"
R ahead8 360 BATCHES_AHEAD=1 SESSIONS_8="256 320" $EIGHT
LEFT=$(left)
[ $LEFT -ge 170 ] && R base8 $LEFT SESSIONS_8="256" $EIGHT
LEFT=$(left)
[ $LEFT -ge 180 ] && R ahead12 $LEFT BATCHES_AHEAD=1 SESSIONS_12="320" REPLICAS=12 LANES=1 \
  GPUS_PER_REPLICA=0.08 CPUS_PER_REPLICA=1 DECODE_PROCESSES=2 DECODE_AHEAD=1
finish ahead8 base8 ahead12

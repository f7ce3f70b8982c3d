# For the next session (not run yet). The thirty-third session found a lane's cycle (~55 ms
# for ~46 frames, eight replicas of one lane, the network on) to be its decode children's:
# their decode (~28 ms, the JPEG engines working through every child's frames together), their
# fill (~10) and 10-14 ms idle between answering one request and getting the next
# (LOG.md, "Thirty-third session"). --decode-early sends the next request before the lane waits
# for the current one. In one call: eight of one with --decode-early at 256 / 320 sessions
# (cold Triton cache), the same without it at 256 (warm), then twelve of one with it at 320 if
# the time allows; --batches-ahead 1 throughout (call 3's 7,079 frames/s shape).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=580 bash docs/benchmarks/h200-2026-12-03i/next/early.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Thirty-third session").
TOTAL=${TOTAL:-580}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
R early8 360 DECODE_EARLY=1 SESSIONS_8="256 320" $EIGHT
LEFT=$(left)
[ $LEFT -ge 150 ] && R base8 $LEFT SESSIONS_8="256" $EIGHT
LEFT=$(left)
[ $LEFT -ge 180 ] && R early12 $LEFT DECODE_EARLY=1 SESSIONS_12="320" REPLICAS=12 LANES=1 \
  GPUS_PER_REPLICA=0.08 CPUS_PER_REPLICA=1 DECODE_PROCESSES=2 DECODE_AHEAD=1 BATCHES_AHEAD=1
finish early8 base8 early12

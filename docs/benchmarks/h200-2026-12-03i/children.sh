# Thirty-third session, call 3: call 2 found --batches-ahead 1 lengthened the decode stage by
# what it took off the gap (busy 74 -> 88 %, push 41 -> 49 ms, 6,489 against 6,515 frames/s):
# a lane's cycle (~56 ms) is its decode children's round -- decode ~27 ms for ~23 frames, fill
# ~10 (their wait for their GPU work behind the network), the hand-off ~13. Here FOUR children
# a lane (about 11 frames a child's round) against two, both with --batches-ahead 1, eight
# replicas of one lane at 256 sessions, in one call.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=480 bash docs/benchmarks/h200-2026-12-03i/children.sh
# > $OUT/call.log 2>&1. Prediction in ../LOG.md ("Thirty-third session").
TOTAL=${TOTAL:-480}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
EIGHT="REPLICAS=8 LANES=1 GPUS_PER_REPLICA=0.12 CPUS_PER_REPLICA=1.5 DECODE_AHEAD=1 BATCHES_AHEAD=1"
R four8 330 SESSIONS_8="256" DECODE_PROCESSES=4 $EIGHT
LEFT=$(left)
[ $LEFT -ge 145 ] && R two8 $LEFT SESSIONS_8="256" DECODE_PROCESSES=2 $EIGHT
finish four8 two8

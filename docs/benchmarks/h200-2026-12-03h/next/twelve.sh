# For the next session, after call.sh (not run yet): what bounds one lane a replica? Twelve
# replicas of one lane (two children each: 36 MPS clients of the 48 a GPU takes) with
# triton-fp16-direct at 256 / 320 sessions, then, if the time allows, --backend null at 320
# (the host path alone; 9,721 frames/s on eight).
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03h/next/twelve.sh
# > $OUT/call.log 2>&1 (~560 s). Prediction in ../../LOG.md ("Thirty-second session").
TOTAL=${TOTAL:-560}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
TWELVE="REPLICAS=12 LANES=1 GPUS_PER_REPLICA=0.08 CPUS_PER_REPLICA=1 DECODE_PROCESSES=2 DECODE_AHEAD=1"
# The 33rd session ran call.sh first: eight of one lane served 6,440 / 6,642 frames/s with the
# network, no more than four of two. So the network runs first here (a cold Triton cache,
# twelve compiling at once: 420 s), then null at 320 with what is left.
R triton12 420 SESSIONS_12="256 320" $TWELVE
LEFT=$(left)
[ $LEFT -ge 160 ] && R null12 $LEFT BACKEND=null SESSIONS_12="320" $TWELVE
finish triton12 null12

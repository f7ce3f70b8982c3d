# For the next session, after call.sh (not run yet): what bounds one lane a replica? Twelve
# replicas of one lane (two children each: 36 MPS clients of the 48 a GPU takes) with
# --backend null at 256 / 320 sessions (the host path alone; 9,721 frames/s on eight), then,
# if the time allows, with triton-fp16-direct at 320.
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03h/next/twelve.sh
# > $OUT/call.log 2>&1 (~500 s). Prediction in ../../LOG.md ("Thirty-second session").
TOTAL=${TOTAL:-560}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
TWELVE="REPLICAS=12 LANES=1 GPUS_PER_REPLICA=0.08 CPUS_PER_REPLICA=1 DECODE_PROCESSES=2 DECODE_AHEAD=1"
R null12 200 BACKEND=null SESSIONS_12="256 320" $TWELVE
LEFT=$(left)
[ $LEFT -ge 280 ] && R triton12 $LEFT SESSIONS_12="320" $TWELVE
finish null12 triton12

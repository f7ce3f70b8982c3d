# For the next session (not run yet). The thirty-fifth session's profile (../call3/) found each
# lane's GPU work short (7-9 ms of kernels a push, spread over ~25 ms by sharing) and the lane
# launching a call only every ~50 ms, ~70 % of it waiting for its decode children's answers:
# the decode round trip is the bound, not the GPU (the thirty-third session's model,
# F / (F / 12,400 + Z), F the frames in flight at the JPEG engines). Larger pushes put more
# frames at the engines at once. One call: four replicas of one lane warmed up to 64 windows
# (pushes up to 192 frames, four decode children a lane) at 320 sessions, cold Triton cache
# (batches 32 and 64 are new); then eight of one up to 16 (the thirty-fifth session's shape,
# warm cache) at 320, the baseline of the same machine. One lane of the four profiles its
# pushes 40-45 (read with scripts/push_profile_report.py on next/prof/trace.json.gz in next.tgz).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=570 bash docs/benchmarks/h200-2026-12-04b/next/big.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Thirty-fifth session").
TOTAL=${TOTAL:-570}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
R big4 360 SESSIONS_4="320" REPLICAS=4 LANES=1 GPUS_PER_REPLICA=0.25 CPUS_PER_REPLICA=3 \
  DECODE_PROCESSES=4 DECODE_AHEAD=1 BATCHES_AHEAD=1 BATCHES=1,2,4,8,16,32,64 \
  TTBALL_PROFILE_PUSHES="40:6:$W/prof"
cp $W/prof/summary.json $OUT/profile-summary.json 2>/dev/null
LEFT=$(left)
[ $LEFT -ge 120 ] && R eight $LEFT SESSIONS_8="320" REPLICAS=8 LANES=1 GPUS_PER_REPLICA=0.12 \
  CPUS_PER_REPLICA=1.5 DECODE_PROCESSES=2 DECODE_AHEAD=1 BATCHES_AHEAD=1
finish big4 eight

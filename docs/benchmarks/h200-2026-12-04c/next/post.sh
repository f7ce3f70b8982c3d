# For the next session (not run yet). The thirty-sixth session's calls 2 and 3: with the
# network a lane's push is ~50 ms against 34 with --backend null, the difference a postprocess
# stage of 16-19 ms a push, 73-87 % of it on the lane thread's CPU -- and --pipeline-depth 2,
# which gives the previous call another push to finish, left it at ~18 ms: not (only) a wait for
# the previous call. Where in postprocess? Its parts are timed now (post_launch: the statistics
# queued behind the network; post_wait: the wait for a call's statistics; post_read: reading
# them into candidates), with their CPU shares. One call: eight replicas of one lane at 320
# sessions, one lane profiled with its Python calls (pushes 40-45, TTBALL_PROFILE_STACK=1); then
# depth 2 with the statistics on a stream of their own (--stats-stream, new: a lane's next
# network no longer queues behind its ~150 small statistics kernels); then, if the time is
# left, the first with --cuda-blocking-sync (a GPU wait sleeps instead of spinning, so a wait's
# CPU share falls and work's does not).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=570 bash docs/benchmarks/h200-2026-12-04c/next/post.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Thirty-sixth session").
TOTAL=${TOTAL:-570}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
R spin8 280 SESSIONS_8="320" $EIGHT TTBALL_PROFILE_PUSHES="40:6:$W/prof" TTBALL_PROFILE_STACK=1
after spin8
cp $W/prof/summary.json $OUT/profile-summary.json 2>/dev/null
python3 scripts/push_profile_report.py --python $W/prof/trace.json.gz > $OUT/profile-report.txt 2>&1
LEFT=$(left)
# split8 first: sleep8 only gets what split8 leaves (a warm start is ready in 70-95 s; R's budget
# leaves 60 s of it for the load test and the stop)
[ $LEFT -ge 300 ] && SPLIT=$(( LEFT - 140 )) || SPLIT=$LEFT
[ $LEFT -ge 130 ] && { R split8 $SPLIT SESSIONS_8="320" $EIGHT PIPELINE_DEPTH=2 STATS_STREAM=1; after split8; }
LEFT=$(left)
[ $LEFT -ge 130 ] && { R sleep8 $LEFT SESSIONS_8="320" $EIGHT BLOCKING_SYNC=1; after sleep8; }
finish spin8 split8 sleep8

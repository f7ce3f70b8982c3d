# Thirty-seventh session, call 2. Call 1 (../h200-2026-12-04c/next/post.sh) timed postprocess's
# parts: what the network adds to a push is post_wait, a wait for the GPU that spins (its CPU
# share 66-85 %), and the profiled lane's network graph (~5.5 ms of kernels) spanned 5-33 ms, its
# statistics graph starting 4-46 ms after launch -- with the SMs ~46 % active. Either the
# replicas' kernels crowd each other off the SMs, or unrelated work is serialized in a client's
# few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default: a replica has a dozen streams
# -- the direct backend's graph branches, normalise, statistics, copies). One call, eight
# replicas of one lane at 320 sessions: as they are; with 32 hardware queues a client; with
# --cuda-blocking-sync (a wait sleeps, so its CPU share falls).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=575 bash docs/benchmarks/h200-2026-12-04d/conn.sh
# > $OUT/call.log 2>&1. Prediction in ../LOG.md ("Thirty-seventh session").
TOTAL=${TOTAL:-575}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
# what a replica and a decode child were started with, read while it warms up
environ() {
  ( sleep $1; for p in $(pgrep -f "ServeReplica|spawn_main"); do
      echo "$p $(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -E '^CUDA_(DEVICE_MAX|MPS_PIPE)' | tr '\n' ' ')"
    done > $W/$2-environ.txt ) &
}
R base8 290 SESSIONS_8="320" $EIGHT
after base8
LEFT=$(left); [ $LEFT -ge 300 ] && CONN=$(( LEFT - 140 )) || CONN=$LEFT
environ 75 conn8  # a warm start is ready in 70-95 s
[ $LEFT -ge 130 ] && { R conn8 $CONN SESSIONS_8="320" $EIGHT CUDA_DEVICE_MAX_CONNECTIONS=32; after conn8; }
LEFT=$(left)
[ $LEFT -ge 130 ] && { R sleep8 $LEFT SESSIONS_8="320" $EIGHT BLOCKING_SYNC=1; after sleep8; }
cp $W/conn8-environ.txt $OUT/ 2>/dev/null
finish base8 conn8 sleep8

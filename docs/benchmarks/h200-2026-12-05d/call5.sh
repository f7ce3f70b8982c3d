#!/usr/bin/env bash
# Prepared in the forty-eighth session (not run yet), for any card, ~8 min: more lanes a GPU in
# the latency shape. At 64 sessions the eight lanes (four replicas of two) are 74 % busy with
# 1.5-1.8 ms of host time a frame while the GPU is 29-38 % busy and the host CPUs ~30 %
# (../h100-2026-12-05c/): the tail is the lanes' queue, and a queue's wait goes as
# busy / (1 - busy). Here six replicas of two lanes (twelve lanes, MPS at 33 % of the SMs a
# replica, so the caps still sum to 200 %) against the four of two at 50 %, alternated, at 64
# sessions (the load test's sessions spread over the replicas). Predicted: the lanes 74 % ->
# ~50-55 % busy if a frame's lane time stays, their queue's mean 3.7 -> ~1.5-2 ms, p99 at 64
# 55-63 -> 50-56 ms; against it, each replica's network on a third of the SMs is slower
# (the twenty-sixth session's cap of 25 % on four replicas raised p99) and the JPEG engines
# and SMs see more clients at once. Carry [".raywhl", ".gpu"]:
#   TOTAL=480 bash docs/benchmarks/h200-2026-12-05d/call5.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-480}
rm -rf /tmp/next
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
FOUR=(RESIZE=triton MPS_PCT=50 SESSIONS_4=64 CACHE=/tmp/rcache LANES=2)
SIX=(RESIZE=triton MPS_PCT=33 REPLICAS=6 SESSIONS_6=64 GPUS_PER_REPLICA=0.16 CPUS_PER_REPLICA=2
     CACHE=/tmp/rcache LANES=2)
RUN four 90 "${FOUR[@]}"
RUN six 90 "${SIX[@]}"
RUN four2 90 "${FOUR[@]}"
RUN six2 90 "${SIX[@]}"
finish $RUNS

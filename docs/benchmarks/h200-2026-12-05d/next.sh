#!/usr/bin/env bash
# Prepared in the forty-seventh session (ran in the forty-eighth on an H100:
# ../h100-2026-12-05c/), for any card, ~9 min: the latency shape
# of ../h100-2026-12-05/p99/ab.sh (four `serve --ray` replicas of two lanes, MPS at 50 % of the
# SMs, the Triton resize, 48 and 64 sessions of 60 frames/s for 8 s) as it is against each
# lane's JPEG decode in a child process (DECODE_PROCESSES=1), alternated. In-process, nvJPEG's
# decode waits for all of its process's GPU work, so a lane's decode waits for the other lane's
# network (the push's decode is 2.0 ms of 5.4 at 64 sessions on the H200, call 1 here); on the
# H100 of ../h100-2026-12-05b/ the children lowered p99 at both loads (137 -> 115 ms at 48,
# 262 -> 179 at 64, one run each, a machine past the cliff). Predicted on an H200: the decode
# stage 2.0 -> ~1 ms a push, p99 at 64 sessions 55-61 -> 50-55 ms. The load test's log now
# names the host's CPU (scripts/gpu_ray_loadtest.sh). Since call 1 a window's rows leave when
# it runs (LOG.md, forty-seventh session): p50 and the mean drop by ~5 ms against call 1's;
# p99 should not move by it, so compare p99 with call 1 and both arms with each other. Carry [".raywhl", ".gpu"]:
#   TOTAL=560 bash docs/benchmarks/h200-2026-12-05d/next.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-560}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
SHAPE=(RESIZE=triton MPS_PCT=50 "SESSIONS_4=48 64" CACHE=/tmp/rcache LANES=2)
RUN base 110 "${SHAPE[@]}"
RUN dec 110 "${SHAPE[@]}" DECODE_PROCESSES=1
RUN base2 110 "${SHAPE[@]}"
RUN dec2 110 "${SHAPE[@]}" DECODE_PROCESSES=1
finish $RUNS

#!/usr/bin/env bash
# Forty-eighth session, second call (ran on the warm H100 after next.sh: ../h100-2026-12-05c/):
# where the latency shape's p99 crosses 50 ms. The forty-seventh session measured 46.9-51.6 ms at 48
# sessions and 55-61 at 64 (this folder's README); 56 was never run. Here 56 sessions as it is
# against decode children (DECODE_PROCESSES=1), alternated, then three lanes a replica with
# decode children at 64 (on the H100 of ../h100-2026-12-05b/ three lanes lowered p99 at 64,
# raised it at 48). Predicted at 56: p99 50-55 ms as it is (between the two measured loads),
# 2-5 ms lower with decode children if next.sh shows them lower at 64. Carry [".raywhl", ".gpu"]:
#   TOTAL=480 bash docs/benchmarks/h200-2026-12-05d/call2.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-480}
rm -rf /tmp/next  # next.sh's runs came back with that call
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
SHAPE=(RESIZE=triton MPS_PCT=50 SESSIONS_4=56 CACHE=/tmp/rcache)
RUN base56 80 "${SHAPE[@]}" LANES=2
RUN dec56 80 "${SHAPE[@]}" LANES=2 DECODE_PROCESSES=1
RUN base56b 80 "${SHAPE[@]}" LANES=2
RUN dec56b 80 "${SHAPE[@]}" LANES=2 DECODE_PROCESSES=1
RUN lanes3dec64 80 RESIZE=triton MPS_PCT=50 SESSIONS_4=64 CACHE=/tmp/rcache LANES=3 DECODE_PROCESSES=1
finish $RUNS

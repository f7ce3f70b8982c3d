#!/usr/bin/env bash
# Forty-seventh session, third call (the warm H100 right after call2.sh): the latency shape at
# 48 sessions as it is, with decode children and with three lanes. Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h100-2026-12-05b/call3.sh > $OUT/call.log 2>&1
TOTAL=330
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
SHAPE=(RESIZE=triton MPS_PCT=50 SESSIONS_4=48 CACHE=/tmp/rcache)
RUN base48 80 "${SHAPE[@]}" LANES=2
RUN dec48 80 "${SHAPE[@]}" LANES=2 DECODE_PROCESSES=1
RUN lanes48 80 "${SHAPE[@]}" LANES=3
finish $RUNS

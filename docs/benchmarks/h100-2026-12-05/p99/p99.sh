#!/usr/bin/env bash
# Forty-sixth session: eight `serve --ray` replicas of one lane (as resize/serve.sh) with the
# Triton resize (RESIZE=triton), below saturation: 64, 96 and 128 sessions of 60 frames/s
# for 8 s each, p99 against the 50 ms target. Run on the machine that ran resize/serve.sh
# (its caches and tuning records in /tmp/rcache); carry [".raywhl", ".gpu"]:
#   TOTAL=300 bash docs/benchmarks/h100-2026-12-05/p99/p99.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-300}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
R p99 $(left) RESIZE=triton $EIGHT SESSIONS_8="64 96 128" CACHE=/tmp/rcache
finish p99

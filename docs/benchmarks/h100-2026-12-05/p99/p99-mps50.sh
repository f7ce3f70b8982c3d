#!/usr/bin/env bash
# Forty-sixth session: the latency shape of the twenty-sixth session (four `serve --ray`
# replicas of two lanes as CUDA MPS clients, each capped at 50 % of the SMs), now with the
# Triton resize (RESIZE=triton), at 48 and 64 sessions of 60 frames/s for 8 s each: does p99
# stay under 50 ms? Run after resize/serve.sh on the same machine (its caches in /tmp/rcache);
# carry [".raywhl", ".gpu"]:
#   TOTAL=280 bash docs/benchmarks/h100-2026-12-05/p99/p99-mps50.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-280}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
R mps50 $(left) RESIZE=triton MPS_PCT=50 SESSIONS_4="48 64" CACHE=/tmp/rcache
finish mps50

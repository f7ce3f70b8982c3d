#!/usr/bin/env bash
# Prepared in the forty-sixth session for an H200 (not run yet): the latency shape of the
# twenty-sixth session (four `serve --ray` replicas of two lanes as CUDA MPS clients, each
# capped at 50 % of the SMs) at 48 and 64 sessions of 60 frames/s, 8 s each, with the Triton
# resize (serve's default since the forty-sixth session) against the compiled one, alternated
# while time is left: does the H200's p99 < 50 ms row (46.3 ms at 64, compiled) hold with the
# new default? On a fresh machine the first run also tunes (its ready time is the cold start
# of this shape). Carry [".raywhl", ".gpu"]:
#   TOTAL=560 bash docs/benchmarks/h100-2026-12-05/p99/ab.sh > $OUT/call.log 2>&1
# Predicted (the H100 calls beside this file): the two resizes within each other's spread
# below saturation (one 8 s run each differed by -8 to +14 ms of p99 there).
TOTAL=${TOTAL:-560}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
RUNS=""
for label in triton compile triton2 compile2; do
  LEFT=$(left)
  # a warm run takes ~100 s (the H100's), the first on a fresh machine ~250 s
  [ "$LEFT" -ge 110 ] || break
  R "$label" "$LEFT" RESIZE=${label%2} MPS_PCT=50 SESSIONS_4="48 64" CACHE=/tmp/rcache
  RUNS="$RUNS $label"
done
finish $RUNS

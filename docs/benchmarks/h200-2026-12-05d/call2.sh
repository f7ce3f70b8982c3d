#!/usr/bin/env bash
# Forty-seventh session, second call on the warm H200 (after h100-2026-12-05/p99/ab.sh, whose
# caches it reuses): (1) `ttball bench` of triton-fp16-direct at batch 64 and 128, twice, one
# cache folder (the first run tunes 128); batch 128 had never been measured; (2) the latency
# shape at 64 sessions with three lanes a replica beside two (Triton resize), alternated.
#   TOTAL=560 OUT=$OUT bash docs/benchmarks/h200-2026-12-05d/call2.sh > $OUT/call.log 2>&1
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/rtcache
S0=$(date +%s); mkdir -p /tmp/b128
for r in 1 2; do
  timeout 230 python3 -m ttball bench --variants triton-fp16-direct --batch 64,128 --no-profile \
    --cache-dir /tmp/bc128 --out /tmp/b128/r$r > /tmp/b128/r$r.log 2>&1; echo "bench r$r rc=$?"
done
tar -czf "$OUT/b128.tgz" -C /tmp b128
TOTAL=$(( ${TOTAL:-560} - ($(date +%s) - S0) ))
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
RUNS=""
for label in lanes3 lanes2 lanes3b; do
  LEFT=$(left); [ "$LEFT" -ge 90 ] || break
  L=${label#lanes}; L=${L%b}
  R "$label" "$LEFT" RESIZE=triton MPS_PCT=50 LANES=$L SESSIONS_4="64" CACHE=/tmp/rcache
  RUNS="$RUNS $label"
done
finish $RUNS

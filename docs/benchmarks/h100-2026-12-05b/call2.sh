#!/usr/bin/env bash
# Forty-seventh session, second call (prepared for an H200, ran on a fresh H100: the bench's first run and the first load
# test tune): (1) `ttball bench` of triton-fp16-direct at batch 64 and 128, twice, one
# cache folder (the first run tunes 128); batch 128 had never been measured; (2) the latency
# shape at 64 sessions (Triton resize) as it is, with three lanes a replica, and with each
# lane's decode in a child process (--decode-processes 1), then as it is again.
#   TOTAL=560 OUT=$OUT bash docs/benchmarks/h100-2026-12-05b/call2.sh > $OUT/call.log 2>&1
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/rtcache
S0=$(date +%s); mkdir -p /tmp/b128
for r in 1 2; do
  timeout $(( r == 1 ? 260 : 150 )) python3 -m ttball bench --variants triton-fp16-direct --batch 64,128 --no-profile \
    --cache-dir /tmp/bc128 --out /tmp/b128/r$r > /tmp/b128/r$r.log 2>&1; echo "bench r$r rc=$?"
done
tar -czf "$OUT/b128.tgz" -C /tmp b128
TOTAL=$(( ${TOTAL:-560} - ($(date +%s) - S0) ))
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
SHAPE=(RESIZE=triton MPS_PCT=50 SESSIONS_4=64 CACHE=/tmp/rcache)
RUN base 90 "${SHAPE[@]}" LANES=2
RUN lanes3 90 "${SHAPE[@]}" LANES=3
RUN dec1 90 "${SHAPE[@]}" LANES=2 DECODE_PROCESSES=1
RUN base2 90 "${SHAPE[@]}" LANES=2
finish $RUNS

TOTAL=330
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
RUNS=""
run() { local label=$1; shift; LEFT=$(left); [ "$LEFT" -ge 80 ] || return 0
  R "$label" "$LEFT" RESIZE=triton MPS_PCT=50 SESSIONS_4="48" CACHE=/tmp/rcache "$@"; RUNS="$RUNS $label"; }
run base48 LANES=2
run dec48 LANES=2 DECODE_PROCESSES=1
run lanes48 LANES=3
finish $RUNS

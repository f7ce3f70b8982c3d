# For the next session (not run yet): where does an upload's time go at the MPS cliff? The same
# four replicas of two lanes under plain MPS (on uvloop, the GPU image's: Ray gives its workers
# uvloop's event loop when it is installed; /readyz's replicas[].event_loop says which), then
# on asyncio's own loop (RAY_USE_UVLOOP=0), then with Python's
# switch interval at 0.5 ms in each replica (`serve --switch-interval-ms 0.5`), 56-72 sessions,
# with each replica's event-loop lag (ttball_event_loop_lag_seconds, serve_push_costs
# --quantiles) and its CPU per thread (procs-4-S.json: tt-event-loop, tt-backend_0,
# tt-backend-1_0, tt-decode_N) and who holds one replica's interpreter lock (PYSPY=1: py-spy --gil).
# Needs .raywhl rebuilt by a make_raywhl.sh that packs site.tar.xz with py-spy.
# Prediction in LOG.md ("Twenty-seventh session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/lag; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-585}  # a load test needs 58 s left to start, takes ~18 s; a cold start ~133 s
source docs/benchmarks/h200-2026-12-03c/_ray.sh
SESSIONS_4="56 64 72" R mps 250 PYSPY=1                      # first: compiles the kernels
SESSIONS_4="56 64 72" R asyncio 170 PYSPY=1 RAY_USE_UVLOOP=0  # then ~65 s to ready
SESSIONS_4="64 72" R switch $(( TOTAL - ($(date +%s)-T0) - 15 )) PYSPY=1 SWITCH_MS=0.5
cp $W/times.txt $OUT/
for l in mps asyncio switch; do cp $W/$l/ray/SUMMARY.md $OUT/SUMMARY-$l.md; done  # stages.txt: in the tgz (8 files a call)
tar -czf $OUT/lag.tgz -C /tmp lag

# For the next session (not run yet). The thirtieth session found each lane waiting ~40 ms a
# push for its decode processes, however the decode was split (6,420-7,140 frames/s in all five
# configurations), and built --decode-ahead: a push sends the next queued push's JPEGs to the
# children once its own are decoded. Here, in one call:
#  1. serve --ray, four replicas of two lanes as MPS clients, nvJPEG, --decode-processes 2
#     --decode-ahead at 160 / 192 sessions (against call 2's 7,052 / 7,071 without it), with
#     /readyz's decode_ahead_hits / _misses after the loads;
#  2. the same without --decode-ahead at 160, same call (the machine's own baseline);
#  3. if time is left: --decode-processes 1 --decode-ahead at 160.
# Each SUMMARY-*.md now has the decode children's CPU % (they name themselves tt-decoder): if a
# child is near a core, its slow decode in the worker is the host, not the JPEG engines.
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03f/next/call.sh
# > $OUT/call.log 2>&1 (~560 s). Prediction in LOG.md ("Thirtieth session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-570}
source scripts/_loadtest.sh
install_wheels
source docs/benchmarks/h200-2026-12-03c/_ray.sh
# the first start compiles Triton's kernels into a cold cache: 136-168 s to ready in this session
SESSIONS_4="160 192" R ahead 300 DECODE_PROCESSES=2 DECODE_AHEAD=1
cp $W/ahead/stages.txt $OUT/stages-ahead.txt 2>/dev/null
# a warm start took 91-167 s to ready here (BUDGET_S - 60 is the wait): 200 leaves 140
LEFT=$(( TOTAL - ($(date +%s)-T0) - 10 ))
[ $LEFT -ge 200 ] && SESSIONS_4="160" R plain 200 DECODE_PROCESSES=2
LEFT=$(( TOTAL - ($(date +%s)-T0) - 10 ))
[ $LEFT -ge 200 ] && SESSIONS_4="160" R one-ahead $LEFT DECODE_PROCESSES=1 DECODE_AHEAD=1
cp $W/times.txt $OUT/
tar -czf $OUT/next.tgz --exclude next/mps-pipe -C /tmp next

# For the next session (not run yet): `serve --ray --mps-sm-percent 50` (the option, set in each
# replica) beside the daemon's default (MPS_PCT=50, what calls 3-4 measured), 56-72 sessions,
# and each replica's /readyz gpu share. Prediction in LOG.md ("Twenty-sixth session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
TOTAL=${TOTAL:-560} SESSIONS_4="56 64 72"
source docs/benchmarks/h200-2026-12-03b/next/_ray.sh
R option $(( TOTAL / 2 )) SM_PERCENT=50
R daemon $(( TOTAL - ($(date +%s)-T0) - 10 )) MPS_PCT=50
ls -la $OUT

# For the next session (not run yet): the cliff under plain MPS with and without
# `serve --cuda-blocking-sync`, 56-72 sessions, with the host's CPU busy % per load test (now
# in SUMMARY.md), then the GPU test of ttball.cudasched. Prediction in LOG.md.
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
TOTAL=${TOTAL:-560} SESSIONS_4="56 64 72"
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cudasched.py > $OUT/tests.log 2>&1; t tests
source docs/benchmarks/h200-2026-12-03b/next/_ray.sh
R spin $(( (TOTAL - ($(date +%s)-T0)) / 2 ))
R blocking $(( TOTAL - ($(date +%s)-T0) - 10 )) BLOCKING_SYNC=1
ls -la $OUT

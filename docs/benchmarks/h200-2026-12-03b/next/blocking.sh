# For the next session (not run yet): the cliff under plain MPS with and without
# `serve --cuda-blocking-sync`, 56-72 sessions, with the host's CPU busy % per load test (now
# in SUMMARY.md), then the GPU test of ttball.cudasched. Prediction in LOG.md.
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
TOTAL=${TOTAL:-560}
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cudasched.py > $OUT/tests.log 2>&1; t tests
R() { # label budget env...
  local label=$1 budget=$2; shift 2
  env "$@" MPS=1 CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 DIRECT_STREAMS=1 \
    BACKEND=triton-fp16-direct LANES=2 GPUS_PER_REPLICA=0.25 CPUS_PER_REPLICA=3 REPLICAS="4" \
    SESSIONS_4="56 64 72" SESSIONS_PER_CLIENT=32 DURATION=8 BUDGET_S=$budget OUT=/tmp/$label \
    bash scripts/gpu_ray_loadtest.sh > /tmp/$label.log 2>&1; t $label
  cp /tmp/$label/ray/SUMMARY.md $OUT/SUMMARY-$label.md 2>/dev/null
  cp /tmp/$label/ray/ready-4.json $OUT/ready-$label.json 2>/dev/null
  PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py --quantiles /tmp/$label/ray > $OUT/stages-$label.txt 2>&1
  tar -czf $OUT/$label.tgz -C /tmp $label/ray $label.log 2>/dev/null
}
R spin $(( (TOTAL - ($(date +%s)-T0)) / 2 ))
R blocking $(( TOTAL - ($(date +%s)-T0) - 10 )) BLOCKING_SYNC=1
ls -la $OUT

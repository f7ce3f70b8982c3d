# Twenty-sixth session, call 4: where the MPS cap stops holding p99 under 50 ms: MPS_PCT=50 at
# 72-88 sessions, then MPS_PCT=25 (each replica on a quarter of the SMs) at 64-96.
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
TOTAL=${TOTAL:-560}
R() { # label pct sessions budget
  MPS=1 MPS_PCT=$2 CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 DIRECT_STREAMS=1 BACKEND=triton-fp16-direct \
    LANES=2 GPUS_PER_REPLICA=0.25 CPUS_PER_REPLICA=3 REPLICAS="4" SESSIONS_4="$3" \
    SESSIONS_PER_CLIENT=32 DURATION=8 BUDGET_S=$4 OUT=/tmp/$1 bash scripts/gpu_ray_loadtest.sh > /tmp/$1.log 2>&1; t $1
  cp /tmp/$1/ray/SUMMARY.md $OUT/SUMMARY-$1.md 2>/dev/null
  PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py --quantiles /tmp/$1/ray > $OUT/stages-$1.txt 2>&1
  PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py /tmp/$1/ray >> $OUT/stages-$1.txt 2>&1
  tar -czf $OUT/$1.tgz -C /tmp $1/ray $1.log 2>/dev/null
}
R mps50 50 "72 80 88" $(( TOTAL / 2 - 20 ))
R mps25 25 "64 72 80 96" $(( TOTAL - ($(date +%s)-T0) - 10 ))
ls -la $OUT

# Twenty-sixth session, call 1: `serve --ray` (4 replicas x 2 lanes, 0.25 GPU each) under CUDA
# MPS and then under time slices, same machine, same call: 40-96 sessions. Repeats the lost
# results of the twenty-fifth session's call D (MPS, 40-56) and adds the A/B and the load
# near saturation.
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
TOTAL=${TOTAL:-580}
nvidia-smi > $OUT/smi.txt 2>&1
R() { # mode-label MPS-value budget
  MPS=$2 CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 DIRECT_STREAMS=1 BACKEND=triton-fp16-direct \
    LANES=2 GPUS_PER_REPLICA=0.25 CPUS_PER_REPLICA=3 REPLICAS="4" SESSIONS_4="40 48 56 64 96" \
    SESSIONS_PER_CLIENT=32 DURATION=8 BUDGET_S=$3 OUT=/tmp/$1 bash scripts/gpu_ray_loadtest.sh > /tmp/$1.log 2>&1; t $1
  cp /tmp/$1/ray/SUMMARY.md $OUT/SUMMARY-$1.md 2>/dev/null
  PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py --quantiles /tmp/$1/ray > $OUT/stages-$1.txt 2>&1
  PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py /tmp/$1/ray >> $OUT/stages-$1.txt 2>&1
  tar -czf $OUT/$1.tgz -C /tmp $1/ray $1.log 2>/dev/null
}
R mps 1 $(( TOTAL / 2 + 10 ))
R slices "" $(( TOTAL - ($(date +%s)-T0) - 10 ))
ls -la $OUT

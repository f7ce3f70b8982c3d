# Twenty-fifth session, call A: `serve --ray`, four replicas of two lanes under CUDA MPS, the
# moderate loads where p99 was 51-58 ms with time slices (twenty-fourth session, call C).
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
nvidia-smi > $OUT/smi.txt 2>&1
R=$(( 580 - ($(date +%s)-T0) ))
MPS=${MPS-1} CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 DIRECT_STREAMS=1 BACKEND=triton-fp16-direct \
  LANES=2 GPUS_PER_REPLICA=0.25 CPUS_PER_REPLICA=3 REPLICAS="4" SESSIONS_4="${SESSIONS_4:-32 40 48 56 64 80}" \
  SESSIONS_PER_CLIENT=32 DURATION=8 BUDGET_S=$R OUT=/tmp/ray bash scripts/gpu_ray_loadtest.sh > /tmp/ray.log 2>&1; t ray
cp /tmp/ray/ray/SUMMARY.md $OUT/SUMMARY-ray.md 2>/dev/null
PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py --quantiles /tmp/ray/ray > $OUT/stages.txt 2>&1
PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py /tmp/ray/ray >> $OUT/stages.txt 2>&1
tail -n 40 /tmp/ray.log > $OUT/ray-tail.log
tar -czf $OUT/ray.tgz -C /tmp ray/ray ray.log 2>/dev/null
ls -la $OUT

set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
PYTHONPATH=$PWD timeout 200 python3 scripts/gpu_split_streams.py --out $OUT/split.json --batch 64 --splits 1,2,4 > $OUT/split.log 2>&1; t split
R=$(( 575 - ($(date +%s)-T0) ))
CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 DIRECT_STREAMS=1 BACKEND=triton-fp16-direct LANES=2 \
  GPUS_PER_REPLICA=0.25 CPUS_PER_REPLICA=3 REPLICAS="4" SESSIONS_4="40 48 56" \
  SESSIONS_PER_CLIENT=32 DURATION=8 BUDGET_S=$R OUT=/tmp/ray bash scripts/gpu_ray_loadtest.sh > /tmp/ray.log 2>&1; t ray
cp /tmp/ray/ray/SUMMARY.md $OUT/SUMMARY-ray.md 2>/dev/null
tar -czf $OUT/ray.tgz -C /tmp ray ray.log 2>/dev/null
ls -la $OUT

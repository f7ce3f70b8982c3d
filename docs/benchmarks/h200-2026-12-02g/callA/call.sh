set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
nvidia-smi > $OUT/smi.txt 2>&1; nproc >> $OUT/smi.txt
CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 DIRECT_STREAMS=1 BACKEND=triton-fp16-direct LANES=2 \
  GPUS_PER_REPLICA=0.25 CPUS_PER_REPLICA=3 REPLICAS="1 4" SESSIONS_1="32" SESSIONS_4="64 96 128 160" \
  SESSIONS_PER_CLIENT=32 DURATION=8 BUDGET_S=400 OUT=/tmp/ray bash scripts/gpu_ray_loadtest.sh > /tmp/ray.log 2>&1; t ray
export PYTHONPATH=$PWD:/tmp/site
R=$(( 575 - ($(date +%s)-T0) ))
timeout $R ncu --profile-from-start off --clock-control none --set full --csv --page details \
  python3 scripts/gpu_ncu.py --batch 64 --steps 2,4 --tma --rows --direct > /tmp/ncu.csv 2> /tmp/ncu.err; t ncu
gzip -c /tmp/ncu.csv > $OUT/ncu-steps2-4.csv.gz
cp /tmp/ray/ray/SUMMARY.md $OUT/SUMMARY-ray.md 2>/dev/null
tar -czf $OUT/ray.tgz -C /tmp ray ray.log ncu.err 2>/dev/null
ls -la $OUT

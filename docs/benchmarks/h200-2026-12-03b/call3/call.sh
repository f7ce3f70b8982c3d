# Twenty-sixth session, call 3: main with the resident 1x1 kernel merged (working tree):
# `ttball verify` of triton-fp16-direct (5 synthetic clips + the real rally), then `serve --ray`
# under MPS with each replica on at most half of the SMs (MPS_PCT=50), 48-96 sessions: does a
# cap on each client remove call 1's cliff at 64 sessions under MPS?
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
TOTAL=${TOTAL:-580}
nvidia-smi > $OUT/smi.txt 2>&1
SKIP_EAGER=1 SKIP_ONNX=1 COMPILE=triton-fp16-direct COMPILE_S=200 BUDGET_S=215 OUT=/tmp/v bash scripts/gpu_verify.sh > $OUT/verify.log 2>&1; t verify
cp /tmp/v/verify/SUMMARY.md $OUT/SUMMARY-verify.md 2>/dev/null
tar -czf $OUT/verify.tgz --exclude=images -C /tmp v 2>/dev/null
MPS=1 MPS_PCT=50 CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 DIRECT_STREAMS=1 BACKEND=triton-fp16-direct \
  LANES=2 GPUS_PER_REPLICA=0.25 CPUS_PER_REPLICA=3 REPLICAS="4" SESSIONS_4="48 56 64 96" \
  SESSIONS_PER_CLIENT=32 DURATION=8 BUDGET_S=$(( TOTAL - ($(date +%s)-T0) - 15 )) OUT=/tmp/mps50 bash scripts/gpu_ray_loadtest.sh > /tmp/mps50.log 2>&1; t mps50
cp /tmp/mps50/ray/SUMMARY.md $OUT/SUMMARY-mps50.md 2>/dev/null
PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py --quantiles /tmp/mps50/ray > $OUT/stages-mps50.txt 2>&1
PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py /tmp/mps50/ray >> $OUT/stages-mps50.txt 2>&1
tar -czf $OUT/mps50.tgz -C /tmp mps50/ray mps50.log 2>/dev/null
ls -la $OUT

# Call 2: is the GPU busy at the MPS cliff? The same four replicas under plain MPS (40-72
# sessions), under time slices (56-96) and with `serve --ray --mps-sm-percent 50` (56-72), each
# load test now with nvidia-smi's utilization.gpu every 100 ms and Hopper's GPM metrics (SM
# utilization, occupancy, DRAM) every second. Prediction in LOG.md ("Twenty-seventh session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/c2; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-540}
{ which nsys ncu dcgmi; nvidia-smi --version; nvidia-smi dmon --gpm-metrics 1,2,3,10 -c 2; } > $W/tools.txt 2>&1
source docs/benchmarks/h200-2026-12-03c/_ray.sh
SESSIONS_4="40 56 64 72" R mps $(( TOTAL * 36 / 100 ))
SESSIONS_4="56 64 96" R slices $(( TOTAL * 66 / 100 - ($(date +%s)-T0) )) MPS=
SESSIONS_4="56 64 72" R option $(( TOTAL - ($(date +%s)-T0) - 15 )) SM_PERCENT=50
cp $W/times.txt $W/tools.txt $OUT/
tar -czf $OUT/c2.tgz -C /tmp c2
ls -la $OUT

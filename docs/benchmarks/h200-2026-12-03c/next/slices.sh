# For the next session (not run yet), after lag.sh: time slices at 64-96 sessions with the same
# instruments (the replicas' event-loop lag and CPU per thread), Python's switch interval at
# 0.5 ms in each replica: call 3 of this folder found the GPU busy only ~50 % (utilization.gpu;
# SMs 24-36 % busy) at saturation with the default 5 ms, 5,668 frames/s at 96 (p99 193.5 ms).
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/slices; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
source docs/benchmarks/h200-2026-12-03c/_ray.sh
SESSIONS_4="64 80 96 112" R slices 480 PYSPY=1 MPS= SWITCH_MS=0.5   # time slices: ~130 s to ready
cp $W/times.txt $W/slices/stages.txt $OUT/; cp $W/slices/ray/SUMMARY.md $OUT/SUMMARY-slices.md
tar -czf $OUT/slices.tgz -C /tmp slices

# For the next session (not run yet), after lag.sh: time slices at 40-96 sessions with the same
# instruments (the replicas' event-loop lag and CPU per thread): call 2 of this folder found the
# GPU busy only ~50 % (utilization.gpu; SMs 24-36 % busy) at saturation, 5,667 frames/s at 96.
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/slices; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
source docs/benchmarks/h200-2026-12-03c/_ray.sh
SESSIONS_4="40 64 80 96" R slices 480 MPS=            # time slices: ~130 s to ready
cp $W/times.txt $W/slices/stages.txt $OUT/; cp $W/slices/ray/SUMMARY.md $OUT/SUMMARY-slices.md
tar -czf $OUT/slices.tgz -C /tmp slices

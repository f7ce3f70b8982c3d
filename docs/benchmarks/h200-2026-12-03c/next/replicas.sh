# For the next session (not run yet), after lag.sh: if each replica's event loop is what stops
# `serve --ray` (the GPU is half idle at its ceiling: call 3), twice the replicas with one lane
# each should serve more. Eight replicas of one lane as MPS clients (0.125 GPU, 1.5 CPUs each)
# at 64-160 sessions, then the four replicas of two lanes at 128 (6,599 frames/s in the
# twenty-fourth session, with asyncio's loop) in the same call. Prediction in LOG.md.
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/reps; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-585}
source docs/benchmarks/h200-2026-12-03c/_ray.sh
# eight replicas compile at once on a cold machine: give the start ~200 s
R eight 390 PYSPY=1 REPLICAS=8 LANES=1 GPUS_PER_REPLICA=0.125 CPUS_PER_REPLICA=1.5 SESSIONS_8="64 96 128 160"
SESSIONS_4="128" R four $(( TOTAL - ($(date +%s)-T0) - 15 )) PYSPY=1
cp $W/times.txt $OUT/
for l in eight four; do cp $W/$l/ray/SUMMARY.md $OUT/SUMMARY-$l.md; done  # stages.txt: in the tgz (8 files a call)
tar -czf $OUT/reps.tgz -C /tmp reps

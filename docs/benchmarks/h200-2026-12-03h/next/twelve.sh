# For the next session, after call.sh (not run yet): what bounds one lane a replica? Twelve
# replicas of one lane (two children each: 36 MPS clients of the 48 a GPU takes) with
# --backend null at 256 / 320 sessions (the host path alone; 9,721 frames/s on eight), then,
# if the time allows, with triton-fp16-direct at 320.
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03h/next/twelve.sh
# > $OUT/call.log 2>&1 (~500 s). Prediction in ../../LOG.md ("Thirty-second session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-560}
source scripts/_loadtest.sh
install_wheels
source docs/benchmarks/h200-2026-12-03c/_ray.sh
TWELVE="REPLICAS=12 LANES=1 GPUS_PER_REPLICA=0.08 CPUS_PER_REPLICA=1 DECODE_PROCESSES=2 DECODE_AHEAD=1"
R null12 200 BACKEND=null SESSIONS_12="256 320" $TWELVE
LEFT=$(( TOTAL - ($(date +%s)-T0) - 10 ))
[ $LEFT -ge 280 ] && R triton12 $LEFT SESSIONS_12="320" $TWELVE
for l in null12 triton12; do cp $W/$l/stages.txt $OUT/stages-$l.txt 2>/dev/null; done
cp $W/times.txt $OUT/times.log
tar -czf $OUT/next.tgz --exclude 'next/mps-pipe*' -C /tmp next

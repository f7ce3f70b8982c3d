# Call 2 of the thirty-first session. Call 1 (../h200-2026-12-03f/next/call.sh) found
# --decode-ahead taking 97 % of pushes' decodes ahead with no gain (6,162 against 6,137 frames/s
# at 160 sessions): the decode stage's wait fell 8 ms and the duplicate check's and the readback's
# GPU waits grew by the same, the push stayed ~50 ms -- and every push was full, ~47 of the 48
# frames that 16 windows allow. Here, in one call, the batch limit raised to 32 windows:
#  1. serve --ray, four replicas of two lanes as MPS clients, nvJPEG, --decode-processes 2
#     --decode-ahead, warm-up batches 1,2,4,8,16,32 (so --max-batch 32) at 192 / 256 sessions;
#  2. the same at 16 (call 1's configuration) at 192, same call (the machine's own baseline).
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03g/call.sh
# > $OUT/call.log 2>&1 (~560 s). Prediction in ../LOG.md ("Thirty-first session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-570}
source scripts/_loadtest.sh
install_wheels
source docs/benchmarks/h200-2026-12-03c/_ray.sh
# cold Triton cache and one more batch size to tune: up to ~230 s to ready (BUDGET_S - 60)
SESSIONS_4="192 256" R b32 330 DECODE_PROCESSES=2 DECODE_AHEAD=1 BATCHES=1,2,4,8,16,32
cp $W/b32/stages.txt $OUT/stages-b32.txt 2>/dev/null
LEFT=$(( TOTAL - ($(date +%s)-T0) - 10 ))
[ $LEFT -ge 170 ] && SESSIONS_4="192" R b16 $LEFT DECODE_PROCESSES=2 DECODE_AHEAD=1
cp $W/b16/stages.txt $OUT/stages-b16.txt 2>/dev/null
cp $W/times.txt $OUT/
tar -czf $OUT/next.tgz --exclude next/mps-pipe -C /tmp next

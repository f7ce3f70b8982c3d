# For the next session (not run yet). The thirty-second session found the worker's ceiling in
# each replica's interpreter lock: with --backend null, eight replicas of ONE lane served 9,721
# frames/s at 256 sessions against ~5,000 for four of two (LOG.md, "Thirty-second session").
# Here, in one call, the real network: triton-fp16-direct on eight replicas of one lane (two
# nvJPEG children each, --decode-ahead, MPS) at 256 / 320 sessions, then call 1's four replicas
# of two lanes at 256 -- the same call's baseline (a warm compile cache by then: ~90 s to ready,
# so it runs only with 200 s left).
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03h/next/call.sh
# > $OUT/call.log 2>&1 (~520 s). Prediction in ../../LOG.md ("Thirty-second session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-570}
source scripts/_loadtest.sh
install_wheels
source docs/benchmarks/h200-2026-12-03c/_ray.sh
# eight replicas compiling a cold Triton cache at once: allow ~300 s to ready (BUDGET_S - 60)
R eight 360 REPLICAS=8 LANES=1 GPUS_PER_REPLICA=0.12 CPUS_PER_REPLICA=1.5 SESSIONS_8="256 320" \
  DECODE_PROCESSES=2 DECODE_AHEAD=1
LEFT=$(( TOTAL - ($(date +%s)-T0) - 10 ))
[ $LEFT -ge 200 ] && SESSIONS_4="256" R four $LEFT DECODE_PROCESSES=2 DECODE_AHEAD=1
for l in eight four; do cp $W/$l/stages.txt $OUT/stages-$l.txt 2>/dev/null; done
cp $W/times.txt $OUT/times.log
tar -czf $OUT/next.tgz --exclude 'next/mps-pipe*' -C /tmp next

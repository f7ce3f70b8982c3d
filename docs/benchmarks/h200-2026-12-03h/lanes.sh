# Thirty-second session, call 4 (the device time left: ~300 s). Call 3: with the inbox written
# through a memoryview the children's wake-up (to_child) fell 3.1 -> 1.1 ms, and the wait moved to
# the lane's own wake-up after a child answers (from_child 10 -> 15 ms) and the copies out
# (6 -> 9 ms); a shorter switch interval made both worse (0.5 ms: 23 and 14). Is it the lanes
# of one process contending for its interpreter lock (two lanes and the event loop)? Here, with
# --backend null (the host path alone, ~5,000 frames/s in call 1): eight replicas of ONE lane
# (two children each) at 256 sessions, then, if the time allows, call 1's four of two lanes.
# Run: TOTAL=290 bash docs/benchmarks/h200-2026-12-03h/lanes.sh > $OUT/call.log 2>&1 (carry .raywhl, .gpu)
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-290}
source scripts/_loadtest.sh
install_wheels
source docs/benchmarks/h200-2026-12-03c/_ray.sh
R eight 170 BACKEND=null REPLICAS=8 LANES=1 GPUS_PER_REPLICA=0.12 CPUS_PER_REPLICA=1.5 \
  SESSIONS_8="256" DECODE_PROCESSES=2 DECODE_AHEAD=1
LEFT=$(( TOTAL - ($(date +%s)-T0) - 5 ))
[ $LEFT -ge 110 ] && SESSIONS_4="256" R four $LEFT BACKEND=null DECODE_PROCESSES=2 DECODE_AHEAD=1
for l in eight four; do cp $W/$l/stages.txt $OUT/stages-$l.txt 2>/dev/null; done
cp $W/times.txt $OUT/times.log
tar -czf $OUT/next.tgz --exclude 'next/mps-pipe*' -C /tmp next

# Thirty-second session, call 3. Call 1 (--backend null) served LESS than the network
# (~5,000 against 6,831 frames/s) with the GPU 15 % busy, the children's wake-up (to_child)
# 25 ms a push against 10: the lanes wait on the host, not the GPU. On this machine a thread
# that lets the interpreter lock go (every torch op, every numpy copy of 150 KB) waits up to
# the switch interval (5 ms) to take it back while another thread is busy: 22 numpy copies
# 0.13 -> 47.6 ms, 22 clone() 0.11 -> 111 ms beside one busy thread (0.5 ms interval: 7.8 and
# 9.5 ms; LOG.md, "Thirty-second session"). This call: the inbox written through a memoryview
# (no release a frame: in this tree), then serve --ray as call 1's triton run (four replicas of
# two lanes, MPS, nvJPEG, two decode children a lane, --decode-ahead) at the Python default
# switch interval and at 0.5 and 0.1 ms (serve --switch-interval-ms).
# Run: bash docs/benchmarks/h200-2026-12-03h/switch.sh > $OUT/call.log 2>&1 (carry .raywhl, .gpu; ~560 s)
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-570}
source scripts/_loadtest.sh
install_wheels
source docs/benchmarks/h200-2026-12-03c/_ray.sh
# a cold Triton cache: 136-210 s to ready (BUDGET_S - 60 is the wait)
SESSIONS_4="256" R base 300 DECODE_PROCESSES=2 DECODE_AHEAD=1
LEFT=$(( TOTAL - ($(date +%s)-T0) - 10 ))
[ $LEFT -ge 150 ] && SESSIONS_4="256 320" R sw05 $LEFT DECODE_PROCESSES=2 DECODE_AHEAD=1 SWITCH_MS=0.5
LEFT=$(( TOTAL - ($(date +%s)-T0) - 10 ))
[ $LEFT -ge 130 ] && SESSIONS_4="256" R sw01 $LEFT DECODE_PROCESSES=2 DECODE_AHEAD=1 SWITCH_MS=0.1
for l in base sw05 sw01; do cp $W/$l/stages.txt $OUT/stages-$l.txt 2>/dev/null; done
cp $W/times.txt $OUT/
tar -czf $OUT/next.tgz --exclude 'next/mps-pipe*' -C /tmp next

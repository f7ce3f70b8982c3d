#!/usr/bin/env bash
# Fifty-seventh session (prepared for the next), any card, one call of END_S seconds (default
# 560: four starts when the first compiles and tunes). Does a worker started with
# --decode-on-arrival serve slower with it switched off? In call26b (../h100-2026-12-06f/) the
# loads decoding in the pushes (decode_on_arrival off, the arrival decoder idle) ran 2.7-2.9
# frames a push and p99 60.6-63.6 ms, against 2.0-2.4 and 47-55 in call 24 on another H100
# (../h100-2026-12-06e/) without the option. The decoder's existence is a start-up property, so
# starts alternate: p1 and p3 with --decode-on-arrival (never switched on), p2 and p4 without;
# each serves 63, 64, 65 and 66 sessions (call 24's shape: six replicas of two lanes at 33 %,
# --no-carry-windows, --live-settings). Predicted: the idle decoder costs nothing (its thread
# blocks on an empty queue; a push adds one timed stage and two counter increments): the two
# sets' mean p99 within ~3 ms of each other (call 24's starts spread 47.2-54.5 over loads) and
# frames a push within 0.2; a host like call 24's gives 2.0-2.4 frames, p99 47-55 in both. A
# difference beyond that, the same way in both pairs, would put it on the option.
# Read: python scripts/serve_push_costs.py --loads next/p{1,2,3,4}/ray (and SUMMARY-* for the
# host's stolen CPU, first).
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call27.sh > $OUT/call.log 2>&1
END_S=${END_S:-560}
START=$(date +%s)
source scripts/_loadtest.sh
install_wheels
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6="63 64 65 66" S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
for start in "p1 1" "p2 " "p3 1" "p4 "; do
  set -- $start
  RUN $1 100 "${SIX[@]}" CARRY=0 LIVE=1 ${2:+ARRIVAL=1}
done
finish $RUNS

#!/usr/bin/env bash
# Fifty-seventh session (prepared for the next), any card, one call of END_S seconds (default
# 560: four starts when the first compiles and tunes). call26b.sh again, with starts without
# the option beside: starts alternate without --decode-on-arrival (p1, p3: 63-66 sessions as
# they are) and with it (p2, p4: 63 and 66 decoding in the pushes, 64 and 65 on arrival,
# switched live A B B A), call 24's shape otherwise (six replicas of two lanes at 33 %,
# --no-carry-windows, --live-settings).
# Questions and predictions:
# (1) Does the idle arrival decoder cost the loads decoding in the pushes? In call26b
#     (../h100-2026-12-06f/) those ran 2.7-2.9 frames a push, p99 60.6-63.6 ms, against 2.0-2.4
#     and 47-55 in call 24 on another H100. Predicted: nothing -- p2/p4's 63 and 66 within ~3 ms
#     of p99 and 0.2 frames a push of p1/p3's (serve_push_costs.py --loads).
# (2) How long does an arrival batch take, call to decoded (ttball_arrival_batch_seconds, new;
#     --quantiles' arrival_batch column)? The lanes' queue model (lane_queue_model.py
#     --arrival-*) meets call26b's loss (+21 ms p99 paired) at ~3 ms + 1 ms a frame; it says
#     0.5-2 ms + 0.1-0.5 a frame would have gained. Predicted: 3-6 ms a batch of 1-3 frames
#     (ttball_arrival_batch_frames), and the paired loss again +15 to +25 ms (--pairs on p2 and
#     p4). If the batches take under ~2 ms, the loss is elsewhere (the read-back's wait: the
#     side stream behind the lanes' work, not the decode) and a decoder with two batches in
#     flight would not help.
# Every 5 s each replica's Python stacks are kept (/tmp/next/dump-PID.txt), as in call26b.sh.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call28.sh > $OUT/call.log 2>&1
# Read: python scripts/serve_push_costs.py --loads next/p{1,2,3,4}/ray; --pairs next/p2/ray
# next/p4/ray; --quantiles next/p2/ray (the arrival_batch column).
END_S=${END_S:-560}
START=$(date +%s)
source scripts/_loadtest.sh
install_wheels
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6="63 64 65 66" S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
( while sleep 5; do for p in $(pgrep -f "ServeReplica:ttball"); do
    timeout 5 py-spy dump --nonblocking --pid $p > /tmp/next/dump-$p.new 2>&1 &&
      mv /tmp/next/dump-$p.new /tmp/next/dump-$p.txt
  done; done ) &
DUMPER=$!
live() { echo "{\"decode_on_arrival\": $1}"; }
for start in p1 p2 p3 p4; do
  case $start in
    p1|p3) RUN $start 100 "${SIX[@]}" CARRY=0 LIVE=1 ;;
    *) RUN $start 100 "${SIX[@]}" CARRY=0 LIVE=1 ARRIVAL=1 "LIVE_63=$(live false)" \
         "LIVE_64=$(live true)" "LIVE_65=$(live true)" "LIVE_66=$(live false)" ;;
  esac
done
kill $DUMPER
finish $RUNS

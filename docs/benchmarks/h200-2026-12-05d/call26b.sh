#!/usr/bin/env bash
# Fifty-seventh session (call26.sh again, one arrival decoder a worker), any card, one call of END_S seconds (default 560: four starts when the
# first compiles and tunes). Does decoding on arrival take the decode off the lanes' pushes,
# and what does that give the client? Under call 24's load (../h100-2026-12-06e/: six
# replicas of two lanes at 33 % of the SMs, 63-66 sessions, --no-carry-windows) a push took
# 4.6 ms, 2.4 of them its decode stage (torchvision's nvJPEG, ~2.1 frames a push); the lanes'
# queue model (scripts/lane_queue_model.py, calibrated there) gives the client's p99 as 50.3 ms
# with it and 42.1 without it (--fixed-ms 1.75 --per-frame-ms 0.52; 45.5 with half of it).
# `serve --decode-on-arrival` (new) decodes each upload's frames on a thread and CUDA stream of
# its lane's own (nvjpeg-own, queued without waiting) the moment the event loop queues the
# upload; the push takes them behind an event. Each start (--live-settings) serves four loads
# back to back, A B B A: 63 and 66 sessions decoding in the pushes (decode_on_arrival off),
# 64 and 65 on arrival (PUT /v1/admin/settings on every replica).
# First the GPU tests: the arrival decoder on CUDA, a worker decoding on arrival against a plain
# one (rows within 0.5 px), and the flush test mended in the fifty-sixth session (tests-gpu.log).
# Run once on an H100 (../h100-2026-12-06f/call26/): two of six replicas hung in the first
# load decoding on arrival (every GPU idle, their lane threads spinning), one arrival decoder a
# lane then, made on the lane thread, its next batch started while the last could still be on
# the GPU; call26b.sh runs the same with one a worker, made on its own thread (its nvJPEG
# handle used only where it was made), one batch in flight at a time (the lanes' own calls,
# which never hung, always had theirs read back before the next: nvJPEG reuses its decode
# state's buffers). First the GPU tests, among them 60 requests back to back.
# Predicted (B less A within starts, serve_push_costs.py --pairs): the push's decode stage
# 2.4 -> at most 0.3 ms (arrival_wait ~0, the frames' hand-over), the preprocess stage +0 to
# +0.5 ms (the read-back may wait for a decode still running), the push 4.6 -> 2.5-3.3 ms,
# frames a push 2.1 -> 1.6-1.9 (the model: 1.72 all off, 1.92 half), stay mean -2 to -4 ms
# (model: 10.0 -> 5.8 / 7.6), the client's p99 -3 to -8 ms (model: -8.2 all, -4.8 half). A
# push that falls without the p99 falling would put the cost on the host: the arrival thread's
# interpreter-lock time or CPU beside the lanes' (procs-*.json, py-spy not run).
# Every 5 s each replica's Python stacks (py-spy dump --nonblocking: the process is not
# paused) are kept in /tmp/next/dump-PID.txt, the last before its server stopped: a hang's;
# and once, when a load runs on a GPU idle four times a second apart, every replica's native
# stacks (py-spy dump --native, pausing each) in /tmp/next/native-PID.txt.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call26b.sh > $OUT/call.log 2>&1
END_S=${END_S:-520}
START=$(date +%s)
source scripts/_loadtest.sh
install_wheels
timeout -k 5 120 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/kernels/test_arrival.py \
  tests/serve/test_device_pipeline.py -k "arrival" > $OUT/tests-gpu.log 2>&1
tail -3 $OUT/tests-gpu.log
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6="63 64 65 66" S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
busy() { nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits | head -1; }
( native=0; while sleep 5; do
    pids=$(pgrep -f "ServeReplica:ttball")
    for p in $pids; do
      timeout 5 py-spy dump --nonblocking --pid $p > /tmp/next/dump-$p.new 2>&1 &&
        mv /tmp/next/dump-$p.new /tmp/next/dump-$p.txt
    done
    # a load running on a GPU idle four times a second apart: every replica's native stacks, once
    # (the load test running 5 s or more: while its clients connect the GPU idles; run once,
    # this watcher fired at a load's start and paused every replica)
    lt=$(pgrep -of "ttball.cli loadtest")
    if [ $native = 0 ] && [ -n "$lt" ] && [ "$(ps -o etimes= -p $lt | tr -d ' ')" -ge 5 ] &&
        [ "$(busy)" = 0 ] &&
        sleep 1 && [ "$(busy)" = 0 ] && sleep 1 && [ "$(busy)" = 0 ] && sleep 1 &&
        [ "$(busy)" = 0 ]; then
      for p in $pids; do timeout 30 py-spy dump --native --pid $p > /tmp/next/native-$p.txt 2>&1; done
      native=1
    fi
  done ) &
DUMPER=$!
live() { echo "{\"decode_on_arrival\": $1}"; }
for start in p1 p2 p3 p4; do
  RUN $start 100 "${SIX[@]}" CARRY=0 LIVE=1 ARRIVAL=1 "LIVE_63=$(live false)" \
    "LIVE_64=$(live true)" "LIVE_65=$(live true)" "LIVE_66=$(live false)"
done
kill $DUMPER
finish $RUNS

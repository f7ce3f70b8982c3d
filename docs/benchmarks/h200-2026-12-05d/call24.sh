#!/usr/bin/env bash
# Fifty-fifth session (prepared for the next), any card, one call of END_S seconds (default
# 560; the first start on a fresh machine compiles and tunes, ~110-160 s). Is the slow state a
# property of a server's start, is it the GPU's, and does --flush-after-push gain within a start?
# ../h100-2026-12-06d/ found the runs of one shape (six replicas of two lanes at 33 %, 64
# sessions, --no-carry-windows) in two states: fast (2.1 frames a push, pushes 4.3-4.8 ms,
# client p99 48-51 ms) and slow (2.6-2.9 frames, 6.1-8.0 ms, 57-62), every replica alike, the
# extra time in the preprocess stage's GPU wait, changing between consecutive starts on one
# machine; --flush-after-push was not established across starts (48.3 / 50.8 / 57.5 against
# 49.9-50.9). Here each start (serve --live-settings) serves four loads back to back: 63 and 66
# sessions with the flush on the event loop's hand-off (the default), 64 and 65 with
# --flush-after-push switched on live (PUT /v1/admin/settings on every replica; the summary's
# last table says which load ran which): A B B A, so a linear drift and the load (64.5 sessions
# on average each way) cancel. The flushes export the GPU time of the calls they
# read back (ttball_flush_seconds gpu_between / gpu_normalize / gpu_network / gpu_stats) and
# each batch is timed on its lane's thread (stage `thread`). Each stages-*.txt has
# `serve_push_costs.py --flushes` (ms a flush, with batch_handoff: a batch as the loop sees it
# less on its thread) and `--loads` (a load a row: p99, frames a push, push, preprocess, the
# flushes' GPU work, its live settings). Calls 22-23 had batch less push 0.46-0.50 ms and the flush's hand-offs 0.25-0.27.
# First the GPU test that checks those counters (tests-flush.log).
# Predicted: (1) the state is a start's: a start's 63 and 66 agree (frames a push within ±0.2,
# p99 within ±3 ms) while starts may differ; if not, it comes and goes on its own. (2) The slow
# state is the GPU's: gpu_network (or gpu_between, the gaps on the lane's stream) a flush
# longer in slow loads by about the extra preprocess time (1-1.5 ms a push); if the GPU times
# agree, the host's side (threads' placement) is next: pin replicas. (3) Within a start,
# --flush-after-push's loads (64, 65): hand-offs 0.02-0.03 ms a flush, the flush's GPU wait
# +0.1 ms, the stay's mean 0-1 ms and the client's p99 0-2 ms below their neighbours'. (4)
# batch_handoff 0.2-0.4 ms a push: if so, a lane whose thread takes its next batch itself (no
# event-loop round trip a push; not built) would give back ~0.5 ms of a ~6.2 ms cycle.
# Read each summary's CPU stolen since boot first: above ~0.1 % the host is not one to compare.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call24.sh > $OUT/call.log 2>&1
END_S=${END_S:-560}
START=$(date +%s)
source scripts/_loadtest.sh
install_wheels
timeout -k 5 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/serve/test_device_pipeline.py \
  -k "flush_threads_on_cuda" > $OUT/tests-flush.log 2>&1
tail -3 $OUT/tests-flush.log
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6="63 64 65 66" S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
OFF='{"flush_after_push": false}' ON='{"flush_after_push": true}'
for start in p1 p2 p3 p4; do
  RUN $start 100 "${SIX[@]}" CARRY=0 LIVE=1 "LIVE_63=$OFF" "LIVE_64=$ON" "LIVE_65=$ON" "LIVE_66=$OFF"
done
finish $RUNS

#!/usr/bin/env bash
# Fifty-fifth session (prepared for the next), any card, one call of END_S seconds (default
# 560; the first start on a fresh machine compiles and tunes, ~110-160 s). Is the slow state a
# property of a server's start, or does it come and go under one start, and is it the GPU's?
# ../h100-2026-12-06d/ found the runs of one shape (six replicas of two lanes at 33 %, 64
# sessions, --no-carry-windows) in two states: fast (2.1 frames a push, pushes 4.3-4.8 ms,
# client p99 48-51 ms) and slow (2.6-2.9 frames, 6.1-8.0 ms, 57-62), every replica alike, the
# extra time in the preprocess stage's GPU wait, changing between consecutive starts on one
# machine. Here each start serves three loads back to back (63, 64 and 65 sessions: distinct
# file names, the same load within 2 %), and the flushes now export the GPU time of the calls
# they read back (ttball_flush_seconds gpu_between / gpu_normalize / gpu_network / gpu_stats;
# `serve_push_costs.py --flushes` in each stages-*.txt, ms a flush), and each batch is timed on
# its lane's thread too (stage `thread`: `batch_handoff` = batch less thread, the push's own
# hand-offs through the event loop; `batch_less_push` less that, the runner's work around the
# push). Calls 22-23 had batch less push 0.46-0.50 ms a push and the flush's hand-offs 0.25-0.27.
# First the GPU test that checks those counters (tests-flush.log).
# Predicted: (1) the state is a start's: the three loads of a start agree (frames a push within
# ±0.2, p99 within ±3 ms) while starts may differ; if loads of one start differ as much as starts
# did, the state comes and goes on its own and A/Bs need many short alternations. (2) The slow
# state is the GPU's: gpu_network (or gpu_between, the gaps on the lane's stream) a flush
# longer in slow loads by about the push's extra preprocess time (1-1.5 ms a push); if the GPU
# times agree between states, the host's side (threads' placement) is next: pin replicas.
# (3) batch_handoff 0.2-0.4 ms a push (the flush's hand-offs were 0.25-0.27): if so, a lane
# whose thread takes its next batch itself (no event-loop round trip a push; not built) would
# give back ~0.5-0.7 ms of a ~6.2 ms cycle; under 0.1, the push's 0.5 ms is the runner's own.
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
S6="63 64 65" S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
for start in p1 p2 p3 p4 p5; do
  RUN $start 100 "${SIX[@]}" CARRY=0
done
finish $RUNS

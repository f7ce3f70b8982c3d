#!/usr/bin/env bash
# Fifty-fifth session (prepared), any card, one call of END_S seconds (default 560; the first
# load-test run on a fresh machine compiles, ~110-160 s). First the GPU test of the flush's two
# placements (--flush-thread, --flush-after-push) against a plain worker (tests-flush.log; if it
# fails, only the controls run). Then six at 64 sessions with --no-carry-windows (`sixc`,
# `sixcb`, `sixcc`) against the same with --flush-after-push (`sixa`, `sixab`), alternated.
# Why: call21 (../h100-2026-12-06d/) measured the flush on the lane's thread at 1.1 ms a call
# as the event loop sees it (`idle`), of which its read-back's wait, reading and tracking are
# only 0.43 ms; --flush-thread moved the work, it did not remove it (the pushes grew by ~0.9
# ms). Each push + flush costs a lane two round trips through the event loop (push's results →
# loop → flush handed over → its end → loop → next push handed over). --flush-after-push runs
# the flush in the push's hand-off: one round trip a cycle less. The worker now also times the
# whole flush on its thread (`ttball_flush_seconds{stage="call"}`, and its CPU, "call_cpu")
# and each batch as the loop sees it (`{stage="batch"}`), so `idle` less `call` is what a
# flush's hand-offs cost (flush_call_ms and idle in stages-*.txt).
# Predicted: sixc's idle less call 0.2-0.5 ms a flush (the round trip; the loop's lag is 0.2
# ms mean, 1.5 p95); with --flush-after-push the lanes' occupied share (busy % + idle %) 3-6
# points lower, the server's stay mean 0.4-1.0 ms and p99 1-3 ms shorter, the client's p99
# 1-3 ms lower (inside call21's within-call drift of ~3 ms: read the b runs too). If idle less
# call is under 0.1 ms, the hand-offs are not the cost and sixa gains nothing.
# Read each summary's CPU stolen since boot first: above ~0.1 % the host is not one to compare.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call22.sh > $OUT/call.log 2>&1
END_S=${END_S:-560}
START=$(date +%s)
source scripts/_loadtest.sh
install_wheels
timeout -k 5 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/serve/test_device_pipeline.py \
  -k "flush_threads_on_cuda" > $OUT/tests-flush.log 2>&1
TESTS=$?
tail -5 $OUT/tests-flush.log
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN sixc 130 "${SIX[@]}" CARRY=0
[ $TESTS = 0 ] && RUN sixa 80 "${SIX[@]}" CARRY=0 FLUSH_AFTER=1
RUN sixcb 80 "${SIX[@]}" CARRY=0
[ $TESTS = 0 ] && RUN sixab 80 "${SIX[@]}" CARRY=0 FLUSH_AFTER=1
RUN sixcc 80 "${SIX[@]}" CARRY=0
finish $RUNS

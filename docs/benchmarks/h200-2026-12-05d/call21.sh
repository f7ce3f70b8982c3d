#!/usr/bin/env bash
# Fifty-fourth session (prepared), any card, one call of END_S seconds (default 560; the first
# load-test run on a fresh machine compiles, ~110-160 s). First the GPU tests of the new
# `serve --flush-thread` (two lanes whose flushes run on threads of their own give a plain
# worker's rows) and of the overlap the pipeline's new lock wraps (~1-3 min, tests-flush.log);
# if they fail, only the control runs below (and `sixfb` may not fit in any case).
# Then six at 64 sessions with --no-carry-windows (`sixc`, `sixcb`: carrying never happens at
# this load, ~0.7 windows a push) against the same with --flush-thread (`sixf`, `sixfb`),
# alternated. The worker now times each flush (`idle`), its parts (ttball_flush_seconds: the
# GPU wait, the read-back, the tracking) and each batch's wait for company (`gather`):
# serve_push_costs.py's idle % and wait % columns and flush_*_ms in stages-*.txt. Only the
# flush's GPU wait can leave the lane; its read-back and tracking stay under the lock.
# Why: ../h100-2026-12-06c/ found the pushes never read back (post_wait, post_read, track sum to
# 0): the flush after every push does, on the lane's thread, so the lane is occupied by it and
# --max-delay-ms 0 gained nothing. Predicted (scripts/lane_queue_model.py --sigma 0.25
# --fixed-ms 2.5 --per-frame-ms 0.95 --flush-ms 1.5|2 --flush-when short|thread):
# - sixc: idle % 20-26 (a flush 1.5-2 ms), wait % 36-44, frames a push ~2.1-2.5, p99 as
#   six's on the same host. If idle % < ~8 (a flush < 0.5 ms), the flush is not what occupies
#   the lanes and sixf gains nothing.
# - sixf: the server's stay p99 2.5-3 ms shorter than sixc's (14.2-14.7 against 16.7-17.8 in the
#   model), the client's p99 with it; frames a push ~2.2, the lanes' busy % (pushes) about the
#   same, idle now the flush's own time (not the lane's).
# Read each summary's CPU stolen since boot first: above ~0.1 % the host is not one to compare.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call21.sh > $OUT/call.log 2>&1
END_S=${END_S:-560}
START=$(date +%s)
source scripts/_loadtest.sh
install_wheels
timeout -k 5 180 python3 -m pytest -q -p no:cacheprovider -m gpu tests/serve/test_device_pipeline.py \
  tests/kernels/test_prepost.py -k "flush_threads_on_cuda or lanes_on_cuda or overlap" \
  > $OUT/tests-flush.log 2>&1
TESTS=$?
tail -5 $OUT/tests-flush.log
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN sixc 130 "${SIX[@]}" CARRY=0
[ $TESTS = 0 ] && RUN sixf 80 "${SIX[@]}" CARRY=0 FLUSH_THREAD=1
RUN sixcb 80 "${SIX[@]}" CARRY=0
[ $TESTS = 0 ] && RUN sixfb 80 "${SIX[@]}" CARRY=0 FLUSH_THREAD=1
finish $RUNS

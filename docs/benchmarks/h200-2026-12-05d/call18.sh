#!/usr/bin/env bash
# Fifty-fourth session, any card, one call of END_S seconds (default 500; the first run on a
# fresh machine compiles, ~110 s). call17.sh ran six at 64 sessions with the batcher's wait for
# company at 2 (`six`, `sixb`), 0 (`six0`, `six0b`) and 1 ms (`six1`), in that order, on a quiet
# H100: client p99 49.7, 51.6, 50.8, 54.3, 62.8 ms -- 0 ms worse than the 2 ms run before it
# both times (the queue model's 3-6 ms gain refuted: frames a push stayed 2.1-2.3, not
# 1.3-1.5), 1 ms the worst, but each run also later than the one before, and p99 rose over
# the call. Here the same three settings in a palindrome, 1, 0, 2, 2, 0, 1 ms, so a drift
# linear in time weighs on each setting alike (mean position 3.5). Predicted: 2 ms at or below
# 0 ms in both halves (0 ms does not batch less, and its pushes cost more: 5.1-5.3 ms against
# 4.5-4.7 at the same frames); if 1 ms is again the worst in both halves, it is the setting
# (frames a push 3.1 at 1 ms, against 2.1), not the order.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call18.sh > $OUT/call.log 2>&1
END_S=${END_S:-500}
START=$(date +%s)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p /tmp/waits
  OUT=/tmp/waits bash docs/benchmarks/h200-2026-12-05d/call9.sh
  tar -czf $OUT/waits.tgz -C /tmp waits
fi
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN six1 130 "${SIX[@]}" MAX_DELAY_MS=1
RUN six0 80 "${SIX[@]}" MAX_DELAY_MS=0
RUN six 80 "${SIX[@]}"
RUN sixb 80 "${SIX[@]}"
RUN six0b 80 "${SIX[@]}" MAX_DELAY_MS=0
RUN six1b 80 "${SIX[@]}" MAX_DELAY_MS=1
finish $RUNS

#!/usr/bin/env bash
# Fifty-fourth session, call19.sh's machine still warm (its caches kept), END_S 300: the
# palindrome's second half after call19.sh's 0, 2, 1, 2 ms: 0, 1 and 2 ms (`sixc` did not fit:
# RUN needs 135 s left). Prediction: call18.sh's.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call20.sh > $OUT/call.log 2>&1
END_S=${END_S:-300}
START=$(date +%s)
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN six0b 80 "${SIX[@]}" MAX_DELAY_MS=0
RUN six1b 80 "${SIX[@]}" MAX_DELAY_MS=1
RUN sixc 80 "${SIX[@]}"
finish $RUNS

#!/usr/bin/env bash
# Fifty-fourth session, any card, one call of END_S seconds (default 520). call18.sh's host was
# noisy (1.0-1.1 % of its CPU stolen since boot, 0.4-8.8 % in the runs; four of its six runs
# done): set aside. The same question on the next machine, the palindrome 0, 2, 1, 2, 0 ms
# (five runs fit; 0 and 2 ms at mean position 3, 1 ms at 3), the prediction call18.sh's.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call19.sh > $OUT/call.log 2>&1
END_S=${END_S:-520}
START=$(date +%s)
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN six0 130 "${SIX[@]}" MAX_DELAY_MS=0
RUN six 80 "${SIX[@]}"
RUN six1 80 "${SIX[@]}" MAX_DELAY_MS=1
RUN sixb 80 "${SIX[@]}"
RUN six0b 80 "${SIX[@]}" MAX_DELAY_MS=0
finish $RUNS

#!/usr/bin/env bash
# Fifty-third session, the device time left (~250 s): one `six` at 64 sessions on a fresh
# machine, for one more host's p99 beside its CPU stolen since boot (call13-15.sh: 48.9-50.2 ms
# on an H100 with none stolen, 61.4 on one that had lost 0.9 %). END_S default 185.
#   bash docs/benchmarks/h200-2026-12-05d/call16.sh > $OUT/call.log 2>&1
END_S=${END_S:-185}
TOTAL=$END_S
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
head -1 /proc/stat > $W/boot-stat.txt
RUN six 80 "${SIX[@]}"
finish $RUNS

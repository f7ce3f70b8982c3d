#!/usr/bin/env bash
# Fifty-third session, any card, END_S seconds (default 440). call14.sh's host (an H100) gave
# six 48.9 ms p99 at 64 sessions, twelve replicas of one lane at 33 % 48.8 and 82.4, at 25 %
# 49.9, where call13.sh's host (another H100) gave six 61.4 and twelve at 17 % 118-121: the hosts
# differ more than the shapes, and twelve at 17 % never ran beside twelve at 33 % on one host.
# Here, on one host, alternated: twelve at 17 % (`twelve17`), six, twelve at 33 %, twelve17b,
# six2. Predicted: if the 17 % cap made call13's tail, twelve17's p99 well above six's and
# twelve33's here; if that host made it, all within a few ms.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call15.sh > $OUT/call.log 2>&1
END_S=${END_S:-440}
TOTAL=$END_S
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN twelve17 100 "${TWELVE[@]}" MPS_PCT=17
RUN six 80 "${SIX[@]}"
RUN twelve33 80 "${TWELVE[@]}" MPS_PCT=33
RUN twelve17b 80 "${TWELVE[@]}" MPS_PCT=17
RUN six2 80 "${SIX[@]}"
finish $RUNS

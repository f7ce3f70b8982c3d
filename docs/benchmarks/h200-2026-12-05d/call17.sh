#!/usr/bin/env bash
# Fifty-third session (prepared), any card, one call of END_S seconds (default 440, >= 150 for
# the first run on a fresh machine). At 64 sessions, six replicas of two lanes at 33 % with the
# batcher's wait for company at its default (`--max-delay-ms 2`: `six`, `sixb`) against none
# (`six0`, `six0b`), alternated, then 1 ms (`six1`). Why: on the quiet H100 of
# ../h100-2026-12-06b/ the client's p99 (48.3-50.2 ms) is 33.3 ms of a window's frames arriving
# plus the server's stay (p99 18.5-19.4: queue ~9, push ~9.6), and a lane's push costs ~2.3 ms a
# frame at 2.0 or 2.9 frames a push (little fixed cost), so waiting up to 2 ms for a second
# frame buys a lane almost nothing and costs the frame its wait: a lane gets a frame every ~3 ms
# at this load, so about half of the pushes started from idle wait the whole 2 ms. Predicted for
# `six0`: pushes of fewer frames (2.0 -> ~1.6), lane busy % within +-3 of six's, the server's
# stay p99 1-2 ms shorter and the client's p99 with it; if the lanes' busy % rises by more than
# ~5 points instead (a fixed cost a push after all), p99 rises. Read each summary's CPU stolen
# since boot first: above ~0.1 % the host is not the one to compare with.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call17.sh > $OUT/call.log 2>&1
END_S=${END_S:-440}
TOTAL=$END_S
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN six 100 "${SIX[@]}"
RUN six0 80 "${SIX[@]}" MAX_DELAY_MS=0
RUN sixb 80 "${SIX[@]}"
RUN six0b 80 "${SIX[@]}" MAX_DELAY_MS=0
RUN six1 80 "${SIX[@]}" MAX_DELAY_MS=1
finish $RUNS

#!/usr/bin/env bash
# Forty-ninth session (prepared), for any card, ~8 min: call5 found six replicas of two lanes at 33
# % of the SMs beat four at 50 % at 64 sessions (p99 58.3 / 51.5 against 66.8 / 66.6 ms on an H100,
# ../h100-2026-12-05d/), and a first run of six alone gave 48.7 at 64 and 52.8 at 80 (call 4 there,
# call6.sh with S8=64 TOTAL=200: the time left ran only `six`). Here six against eight replicas of
# ONE lane at 25 % (`one8`), alternated, 64 and 80 sessions. Why one lane: every JPEG decoder in a
# process waits for all of that process's GPU work (LOG.md, twenty-ninth session's diag.sh), so a
# lane's decode waits for the other lane's network too; in the six-replica runs the decode took ~2.5
# ms a push whatever its size (2.0 or 2.8 frames). With one lane a replica the decode waits only for
# the lane's own previous push, which the read-back waits for anyway. Predicted: one8's decode
# ~1.2-1.6 ms a push, a lane's time a frame ~1.6 ms against six's 1.8-2.2; but eight lanes carry
# what twelve did, so they are ~77 % busy (3,840 frames/s x 1.6 ms / 8) against 71 %: p99 level with
# six's, lower only if a frame's lane time falls under ~1.45 ms (71 % busy) or the push's own time
# shrinks enough; higher if eight networks at a quarter of the SMs each take longer than the wait
# they save. (The forty-eighth session's decode children, at four replicas and 50 %, found the in-
# process decode waited little there: 0.65 ms a frame against 0.56 alone.) Carry [".raywhl",
# ".gpu"]:
#   TOTAL=450 bash docs/benchmarks/h200-2026-12-05d/call8.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-450}
# S6, S8: the session counts of each (default "64 80")
source docs/benchmarks/h200-2026-12-05d/_six.sh
ONE8=("${QUARTER8[@]}" LANES=1)
RUN six 110 "${SIX[@]}"
RUN one8 100 "${ONE8[@]}"
RUN six2 110 "${SIX[@]}"
RUN one8b 100 "${ONE8[@]}"
finish $RUNS

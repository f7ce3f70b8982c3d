#!/usr/bin/env bash
# Forty-ninth session, for any card, ~8 min: call5 found six replicas of two lanes at 33 % of
# the SMs a replica beat four at 50 % at 64 sessions (p99 58.3 / 51.5 against 66.8 / 66.6 ms on
# an H100, ../h100-2026-12-05d/). Does it hold at 80 sessions, and do eight replicas of two
# lanes at 25 % (sixteen lanes, one a host core) go further? Alternated, 64 and 80 sessions.
# Predicted: eight at 64 level with six or slightly lower (lanes ~50 % busy against ~55-60 %)
# unless the quarter of the SMs slows each network past what the shorter queue saves; at 80
# six's p99 rises into the sixties. Carry [".raywhl", ".gpu"]:
#   TOTAL=450 bash docs/benchmarks/h200-2026-12-05d/call6.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-450}
# S6, S8: the session counts of each (default "64 80"; a short call: S8=64)
source docs/benchmarks/h200-2026-12-05d/_six.sh
EIGHT=("${QUARTER8[@]}" LANES=2)
RUN six 110 "${SIX[@]}"
RUN eight 80 "${EIGHT[@]}"
RUN six2 110 "${SIX[@]}"
RUN eight2 110 "${EIGHT[@]}"
finish $RUNS

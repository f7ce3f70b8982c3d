#!/usr/bin/env bash
# Fifty-third session, for any card, one call of END_S seconds (default 560). call13.sh (H100)
# gave, at 64 sessions: six replicas of two lanes at 33 % p50 / p99 31.5 / 61.4 ms (the other
# run, 36.6 / 72.7, had 6.6 % of the host's CPU stolen), and TWELVE replicas of one lane at 17 %
# 28.2 / 121.2 and 27.3 / 118.2: the lowest median, twice the tail, every replica alike (2-7 % of
# its windows over 50 ms in the server against 0.2 % in six's), the queue's p99 43 ms against
# 14. Same lanes and load a lane; what differs: no interpreter lock shared by two lanes (the
# median's gain?) and a hard cap of a sixth of the SMs on each lane, where two lanes at 33 %
# share their third (the tail's cause?). This call lifts the cap:
# 1. `twelve33`: twelve replicas of one lane at 33 % each (MPS_PCT=33, oversubscribed 4x), then
#    `six`, `twelve33b`, alternated. Predicted, if the 17 % cap made the tail: p50 ~27 ms and
#    p99 at or under six's; if twelve one-lane processes make it whatever their share (their
#    GPU work interleaved by MPS), p99 ~120 again.
# 2. `sixgil`: six with py-spy --gil on one replica (PYSPY=1; call13 ran out of time before it):
#    the lock held > 60 % of the time, mostly by the two lanes, if the lanes wait for it.
# 3. `twelve25`: at 25 % if time is left.
# Read each run's stolen CPU share (SUMMARY's "host CPU busy % (stolen)") before comparing.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call14.sh > $OUT/call.log 2>&1
END_S=${END_S:-560}
TOTAL=$END_S
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN twelve33 100 "${TWELVE[@]}" MPS_PCT=33
RUN six 80 "${SIX[@]}"
RUN twelve33b 80 "${TWELVE[@]}" MPS_PCT=33
RUN sixgil 80 "${SIX[@]}" PYSPY=1
RUN twelve25 80 "${TWELVE[@]}" MPS_PCT=25
finish $RUNS

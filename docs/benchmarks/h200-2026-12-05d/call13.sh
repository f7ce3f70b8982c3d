#!/usr/bin/env bash
# Fifty-second session (prepared), for any card, one call of END_S seconds (default 580):
# 1. call9.sh (the wait probe on nvjpeg, nvjpeg-own and own, then nvjpeg-own's GPU tests) into
#    /tmp/waits, returned as waits.tgz: on an H100 no decoder waited for another stream's
#    kernel (../h100-2026-12-06/); does torchvision's nvJPEG wait on this card, as the
#    twenty-ninth session's diag.sh found on an H200? ~45 s.
# 2. At 64 sessions, alternated: six replicas of two lanes at 33 % of the SMs (`six`) against
#    TWELVE replicas of one lane at 17 % (`twelve`: as many lanes, none sharing a process's
#    interpreter lock; never run in this latency shape), then `eight` (two lanes at 25 %; call12
#    gave 65.3 against six's 65.6 / 61.2 on an H200, one sample), then `six` with py-spy --gil
#    on one replica (PYSPY=1). Why: one lane profiled in `six` spent 57 % of its thread in gaps,
#    45.6 of 173 ms in gaps of ~0.3 ms spread over its pushes (the lock, or the OS: 30 of 883
#    metadata-only ops took >= 50 us), and eight replicas of ONE lane had the lowest median
#    (27.3 ms against 32.6) but eight lanes for twelve lanes' work (p99 109.6). Predicted:
#    `twelve` p50 25-30 ms, p99 at or under six's if the shared lock is what lengthens a lane's
#    push; p99 above six's if a sixth of the SMs a network costs more than the lock did; the
#    lock held > 60 % of the time in `sixgil`'s replica, most by its two lane threads, if the
#    gaps are its wait.
# Read each run's stolen CPU share (SUMMARY's "host CPU busy % (stolen)") before comparing.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call13.sh > $OUT/call.log 2>&1
END_S=${END_S:-580}
START=$(date +%s)
mkdir -p /tmp/waits
OUT=/tmp/waits bash docs/benchmarks/h200-2026-12-05d/call9.sh
tar -czf $OUT/waits.tgz -C /tmp waits
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
EIGHT=("${QUARTER8[@]}" LANES=2)
RUN six 100 "${SIX[@]}"
RUN twelve 100 "${TWELVE[@]}" MPS_PCT=17
RUN six2 80 "${SIX[@]}"
RUN twelve2 80 "${TWELVE[@]}" MPS_PCT=17
RUN eight 80 "${EIGHT[@]}"
RUN sixgil 80 "${SIX[@]}" PYSPY=1
finish $RUNS

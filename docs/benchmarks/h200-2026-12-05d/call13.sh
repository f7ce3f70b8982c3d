#!/usr/bin/env bash
# Fifty-second session (prepared), for any card, one call of END_S seconds (default 580):
# 1. call9.sh (the wait probe on nvjpeg, nvjpeg-own and own, then nvjpeg-own's GPU tests) into
#    /tmp/waits, returned as waits.tgz: on an H100 no decoder waited for another stream's
#    kernel (../h100-2026-12-06/); does torchvision's nvJPEG wait on this card, as the
#    twenty-ninth session's diag.sh found on an H200? ~45 s.
# 2. six replicas of two lanes at 33 % of the SMs against eight at 25 %, 64 sessions,
#    alternated (call12.sh's first pair gave 65.6 / 61.2 against 65.3 on an H200, one sample of
#    eight), then `six` with py-spy --gil on one replica (PYSPY=1: who holds the interpreter
#    lock; the lane profile found 57 % of a lane thread's time in gaps between recorded calls,
#    ../h200-2026-12-06/). Predicted: eight level with six again (+-5 ms); the lock held
#    > 60 % of the time in that replica, most by the two lane threads, if the gaps are its wait.
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
RUN eight 80 "${EIGHT[@]}"
RUN six2 80 "${SIX[@]}"
RUN eight2 80 "${EIGHT[@]}"
RUN sixgil 80 "${SIX[@]}" PYSPY=1
finish $RUNS

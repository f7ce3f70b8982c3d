#!/usr/bin/env bash
# Fifty-second session, for any card, one call of ~9.5 min: call6's and call8's question in one
# alternated call at 64 sessions only -- six replicas of two lanes at 33 % of the SMs (`six`)
# against eight of two lanes at 25 % (`eight`) and eight of one lane at 25 % (`one8`), then
# again while the time lasts. This session's call11 (nvjpeg against nvjpeg-own) measured `six`
# at 64 on an H100: p99 56.2 / 56.8 ms, 2.5 frames a push, lanes 75 % busy, 2.32 ms of lane
# time a frame; and gpu_decode_waits.py found torchvision's nvJPEG call did NOT wait for another
# stream's 20 ms kernel on that card (0.56 ms behind against 0.58 alone), so call8's premise
# (the decode waits for the other lane's network) does not hold there. Predicted: `eight` within
# +-5 ms of `six` (sixteen lanes ~55 % busy if a frame's lane time holds, but each network on a
# quarter of the SMs); `one8` worse (eight lanes carrying twelve's work need <= 2.1 ms a frame
# even at 100 % busy; only bigger pushes amortising the ~1.5 ms fixed cost a push could save it).
# Carry [".raywhl", ".gpu"]:
#   TOTAL=580 bash docs/benchmarks/h200-2026-12-05d/call12.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-580}
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
EIGHT=("${QUARTER8[@]}" LANES=2)
ONE8=("${QUARTER8[@]}" LANES=1)
# (RUN now starts nothing with < 135 s left: the first call's eight2 and one8b, given 118 and
# 110 s, ran nothing, scripts/gpu_ray_loadtest.sh skipping them)
RUN six 100 "${SIX[@]}"
RUN eight 80 "${EIGHT[@]}"
RUN one8 80 "${ONE8[@]}"
RUN six2 80 "${SIX[@]}"
RUN eight2 80 "${EIGHT[@]}"
RUN one8b 80 "${ONE8[@]}"
finish $RUNS

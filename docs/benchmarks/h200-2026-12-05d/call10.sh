#!/usr/bin/env bash
# Fifty-first session (prepared), for any card: `--jpeg-decoder nvjpeg` against `nvjpeg-own`
# in the six-replica shape (six `serve --ray` replicas of two lanes at 33 % of the SMs, 64
# sessions), alternated. Both decode on the JPEG engines (torchvision's nvJPEG uses them too),
# so what differs is nvjpeg-own's allocators and its call not waiting for the other lane's
# network. Predicted: nvjpeg-own's decode stage ~1 ms a push against ~2.5 (stages.txt), a
# frame's lane time 2.25-2.40 -> ~1.7-1.9 ms, p99 down by the shorter pushes' share; level if
# the wait only moves to the next read-back. Carry [".raywhl", ".gpu"]:
#   TOTAL=450 bash docs/benchmarks/h200-2026-12-05d/call10.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-450}
S6=${S6:-64}
source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN nvjpeg 100 "${SIX[@]}" DECODER=nvjpeg
RUN own 100 "${SIX[@]}" DECODER=nvjpeg-own
RUN nvjpeg2 100 "${SIX[@]}" DECODER=nvjpeg
RUN own2 100 "${SIX[@]}" DECODER=nvjpeg-own
finish $RUNS

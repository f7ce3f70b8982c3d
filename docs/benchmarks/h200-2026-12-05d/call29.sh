#!/usr/bin/env bash
# Fifty-ninth session, for an H200 (any card runs it), one call of END_S seconds (default 480:
# three or four starts when the first compiles and tunes). call28.sh's starts without
# --decode-on-arrival only: six `serve --ray` replicas of two lanes at 33 % of the SMs,
# --no-carry-windows, --live-settings, 63-66 sessions a start.
# Question: is p99 < 50 ms at 64 sessions met on an H200, as on the quiet H100 of call28
# (../h100-2026-12-06g/: 49.41-49.65 at 64 in 3/3 starts, 48.8-51.1 at 63-66)?
# Predicted: the H200's starts so far (call 15-22, ../h200-2026-12-05d/README.md) ran 51-56 ms at
# 64 on hosts with slower CPU stages; the network and GPU stages are faster on it (4.8 TB/s
# against 3.35), the host's decode and Python the same or slower. Predicted p99 at 64: 48-54 ms,
# frames a push 2.0-2.3, stay 8-10 ms; where p99 misses, the stay's split
# (serve_push_costs.py --loads) says whether the host (decode, preprocess) or the GPU stages.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call29.sh > $OUT/call.log 2>&1
# Read: python scripts/serve_push_costs.py --loads next/p{1,2,3,4}/ray
END_S=${END_S:-480}
START=$(date +%s)
source scripts/_loadtest.sh
install_wheels
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
lscpu | grep -E "Model name|^CPU\(s\)|MHz" >> $OUT/gpu.txt 2>&1
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6="63 64 65 66" S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
for start in p1 p2 p3 p4; do
  RUN $start 100 "${SIX[@]}" CARRY=0 LIVE=1
done
finish $RUNS

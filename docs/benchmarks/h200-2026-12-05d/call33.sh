#!/usr/bin/env bash
# Sixty-first session, any card (H200 or H100), one call of END_S seconds (default 420). Is the
# slow state the replicas' kernels sharing SMs under MPS? call30's shape (six `serve --ray`
# replicas of two lanes, --no-carry-windows, --live-settings) at 64 and 65 sessions (two loads a
# start; the load files are named by session count, so the two differ by one),
# starts alternated: p1 as MPS clients at 33 % of the SMs each (call30), p2 without MPS (the
# six contexts time-slice the whole GPU; MPS_PCT has no effect there), p3 with, p4 without if
# time is left. The sixty-first session's quiet H100 ran call30 in the slow state throughout
# (network 1.2-1.7 ms a flush, p99 60-64 ms at 64) with no CPU stolen (h100-2026-12-07b/).
# Predicted before the call: without MPS each flush's network runs alone on the whole GPU, so
# its time a flush falls to the fast state's 0.7-0.8 ms or below (one replica's kernels no
# longer share SMs with five others'), but flushes of different replicas queue behind one
# another (time slices), so p99 at 64 rises (70-90 ms) unless the GPU's 37 % busy leaves few
# collisions. If the network a flush stays at 1.2 ms or more without MPS, the slow state is not
# SM sharing but the kernels' own time on this GPU (clocks, memory), and MPS is cleared.
# Carry [".raywhl/site.tar.xz", ".raywhl/ray-stripped.tar.xz", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call33.sh > $OUT/call.log 2>&1
# Read: python scripts/serve_push_costs.py --loads next/p{1,2,3,4}/ray
END_S=${END_S:-420}
START=$(date +%s)
source scripts/_loadtest.sh
install_wheels
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt 2>&1
lscpu | grep -E "Model name|^CPU\(s\)" >> $OUT/gpu.txt 2>&1
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6="64 65" S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN p1 100 "${SIX[@]}" CARRY=0 LIVE=1
RUN p2 100 "${SIX[@]}" CARRY=0 LIVE=1 MPS=
RUN p3 100 "${SIX[@]}" CARRY=0 LIVE=1
RUN p4 100 "${SIX[@]}" CARRY=0 LIVE=1 MPS=
finish $RUNS

# For the next session (not run yet). The thirty-second session found the worker's ceiling in
# each replica's interpreter lock: with --backend null, eight replicas of ONE lane served 9,721
# frames/s at 256 sessions against ~5,000 for four of two (LOG.md, "Thirty-second session").
# Here, in one call, the real network: triton-fp16-direct on eight replicas of one lane (two
# nvJPEG children each, --decode-ahead, MPS) at 256 / 320 sessions, then call 1's four replicas
# of two lanes at 256 -- the same call's baseline (a warm compile cache by then: ~90 s to ready,
# so it runs only with 200 s left).
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03h/next/call.sh
# > $OUT/call.log 2>&1 (~520 s). Prediction in ../../LOG.md ("Thirty-second session").
TOTAL=${TOTAL:-570}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
# eight replicas compiling a cold Triton cache at once: allow ~300 s to ready (BUDGET_S - 60)
R eight 360 REPLICAS=8 LANES=1 GPUS_PER_REPLICA=0.12 CPUS_PER_REPLICA=1.5 SESSIONS_8="256 320" \
  DECODE_PROCESSES=2 DECODE_AHEAD=1
LEFT=$(left)
[ $LEFT -ge 200 ] && SESSIONS_4="256" R four $LEFT DECODE_PROCESSES=2 DECODE_AHEAD=1
finish eight four

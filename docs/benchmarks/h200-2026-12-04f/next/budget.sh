# For the next session (not run yet): the GPU time a frame, stage by stage, each alone on the
# H200, against the 138 us a frame the worker served in this session's call 3 (1 / 7,266, GPU-time
# bound). The candidate statistics at each fused level, timed a call (scripts/stats_kernels.py
# --calls), then scripts/gpu_e2e.py's stages alone at the lanes' batch of 16 windows: the
# network, nvJPEG's batched decode, the resize (eager and compiled) and the post-processing.
# A few minutes; no Ray, so no .raywhl. carry: [".gpu"] (the stages use synthetic frames; the
# clip is for a later run). Run: TOTAL=300 bash docs/benchmarks/h200-2026-12-04f/next/budget.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Thirty-ninth session", the last part).
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1
TOTAL=${TOTAL:-300}
T0=$(date +%s)
PYTHONPATH=$PWD timeout 90 python3 scripts/stats_kernels.py --batch 16 --calls 50 \
  --out $OUT/stats.json > $OUT/stats.txt 2>&1
LEFT=$(( TOTAL - ($(date +%s) - T0) - 15 ))
PYTHONPATH=$PWD timeout $LEFT python3 scripts/gpu_e2e.py --out $OUT/budget.json \
  --backend triton-fp16-direct --batches 16 --stages frames,backend,network,decode,resize,post \
  --compile-resize --budget-s $(( LEFT - 20 )) > $OUT/budget.log 2>&1
tail -5 $OUT/budget.log

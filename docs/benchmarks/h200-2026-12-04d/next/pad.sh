# For the next session, chained right after next/ops.sh on the same warm machine (its Triton
# and compile caches make both starts warm, ~85 s). Eight of one at 320 sessions with 100
# empty kernels after each call's statistics (TTBALL_PAD_KERNELS=100: ~150 operations a push
# more, ~0.3 ms of GPU time), then as they are again (the same call's baseline, and a second
# reading of ops.sh's base8 for the noise). First, with nothing else on the GPU: how many
# kernels a second 1, 8 and 24 MPS clients get through together (scripts/gpu_ops_rate.py);
# between the two runs, TTBALL_FUSED_WINDOWS=1 (the window statistics alone fused: ~55 kernels
# a call against ops.sh's level 2, ~20).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=590 bash docs/benchmarks/h200-2026-12-04d/next/pad.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Thirty-seventh session").
rm -rf /tmp/next  # ops.sh's runs are in its own $OUT already; the caches stay
TOTAL=${TOTAL:-590}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
pipe=/tmp/mps-ops; mkdir -p $pipe
CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_MPS_LOG_DIRECTORY=$pipe nvidia-cuda-mps-control -d
export CUDA_MPS_PIPE_DIRECTORY=$pipe
PYTHONPATH=$PWD:/tmp/site timeout 60 python3 scripts/gpu_ops_rate.py --out $OUT/ops-one.json \
  --procs 1 --sync 0,1 --kernels 100 --seconds 2 > $OUT/ops.log 2>&1
PYTHONPATH=$PWD:/tmp/site timeout 120 python3 scripts/gpu_ops_rate.py --out $OUT/ops-many.json \
  --procs 8,24 --sync 1 --kernels 100 --seconds 3 >> $OUT/ops.log 2>&1
unset CUDA_MPS_PIPE_DIRECTORY
echo quit | CUDA_MPS_PIPE_DIRECTORY=$pipe nvidia-cuda-mps-control; sleep 2; t ops
R pad8 190 SESSIONS_8="320" $EIGHT TTBALL_PAD_KERNELS=100
after pad8
R win1 180 SESSIONS_8="320" $EIGHT TTBALL_FUSED_WINDOWS=1
after win1
LEFT=$(left)
[ $LEFT -ge 130 ] && { R again8 $LEFT SESSIONS_8="320" $EIGHT; after again8; }
finish pad8 win1 again8

# Thirty-fifth session, call 4 (short: the session's last ~330 s of device time). Call 2's probe
# found any SM work waiting ~0.5 ms behind other processes' memcpys, which fill the SMs. Do
# MPS clients' kernels run side by side when the SMs are free? Eight processes run one-thread
# kernels that spin ~1 ms back to back (every SM but eight free); the probe's steps beside them,
# as MPS clients, then as plain CUDA contexts (time slices). carry: none needed.
# Run: bash docs/benchmarks/h200-2026-12-04b/spin.sh > $OUT/call.log 2>&1
set -x
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
W=/tmp/spin; mkdir -p $W
export CUDA_MPS_PIPE_DIRECTORY=$W/mps-pipe CUDA_MPS_LOG_DIRECTORY=$W/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
timeout 100 python3 scripts/gpu_copy_contention.py --procs 8 --reps 60 \
  --backgrounds none,spin,memcpy --out $OUT/mps.json > $OUT/mps.log 2>&1
echo quit | nvidia-cuda-mps-control; sleep 3
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
timeout 100 python3 scripts/gpu_copy_contention.py --procs 8 --reps 60 \
  --backgrounds none,spin,memcpy --out $OUT/plain.json > $OUT/plain.log 2>&1

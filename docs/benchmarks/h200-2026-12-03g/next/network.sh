# For the next session (not run yet), after next/call.sh: the network alone, shared the way the
# worker shares the GPU. serve --ray's four replicas of two lanes each replay triton-fp16-direct's
# graph of ~16 windows a push, as CUDA MPS clients; here the same processes and lanes run only
# the network, back to back (scripts/gpu_e2e_procs.py --network-only), against one lane at 64
# and at 16 windows:
#   1x64, 1x16 (one lane), 4x16x2 (the worker's shape), 4x16x1, 8x16x1, 4x32x2
# under an MPS daemon. frames_per_s counts 3 frames a window (step 3), comparable with the
# worker's ~6,150-7,140 frames/s; windows_per_s beside it.
# carry: [] (nothing). Run: bash docs/benchmarks/h200-2026-12-03g/next/network.sh > $OUT/network.log 2>&1
# (~300 s). Prediction in ../../LOG.md ("Thirty-first session").
set -x
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tcache TTBALL_CACHE_DIR=/tmp/ttcache
W=/tmp/net; mkdir -p $W
export CUDA_MPS_PIPE_DIRECTORY=$W/mps-pipe CUDA_MPS_LOG_DIRECTORY=$W/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $OUT/machine.txt
timeout 480 python3 scripts/gpu_e2e_procs.py --network-only --backend triton-fp16-direct \
  --rows 1x64,1x16,4x16x2,4x16x1,8x16x1,4x32x2 --sessions 16 --seconds 4 --tag mps \
  --start-timeout-s 150 --budget-s 420 --out $OUT/network.json
echo quit | nvidia-cuda-mps-control

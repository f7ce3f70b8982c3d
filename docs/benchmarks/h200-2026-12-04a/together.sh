# Thirty-fourth session, call 2. Does the GPU hold the decode and the network
# together? serve --ray serves ~6,700 frames/s with the network where the decode alone (~12,400,
# gpu_jpeg_procs.py) and the network alone (~11,250 frames/s, gpu_e2e_procs.py --network-only)
# each carry far more, and call 1 showed neither the children's fill nor their hand-off is the
# bound. Here, outside the worker, as MPS clients as in it: the decode alone, then beside eight
# processes running triton-fp16-direct back to back (gpu_jpeg_procs.py --busy-network), which
# says what each got beside the other.
#   A1/A2: decode alone, 16 clients x 23 frames (the worker's 16 children), 8 x 46 in the
#          process and through two DecoderProcess children each
#   T1: network 8 x 15 windows (the worker's eight lanes) beside decode 16 x 23
#   T2: the same network beside 8 x 46, in the process and through two children each
#   T3: network 8 x 45 windows beside decode 16 x 23 (larger calls, the same decode)
# carry: [".gpu"]. Run: TOTAL=560 bash docs/benchmarks/h200-2026-12-04a/together.sh
# > $OUT/call.log 2>&1. Prediction in ../LOG.md ("Thirty-fourth session").
set -x
START=$(date +%s); TOTAL=${TOTAL:-560}
left() { echo $(( TOTAL - ($(date +%s) - START) )); }
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tcache TTBALL_CACHE_DIR=/tmp/ttcache PYTHONPATH=.
W=/tmp/tog; mkdir -p $W
export CUDA_MPS_PIPE_DIRECTORY=$W/mps-pipe CUDA_MPS_LOG_DIRECTORY=$W/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
python3 -c "import torch, triton, torchvision; print(torch.__version__, triton.__version__, torchvision.__version__)" >> $OUT/machine.txt
nvidia-smi dmon -s u -o T -d 1 > $OUT/dmon.txt 2>&1 &
DMON=$!
J="python3 scripts/gpu_jpeg_procs.py --video .gpu/real_rally_a.mp4 --seconds 4 --tag mps"
stamp() { echo "$1 $(( $(date +%s) - START ))s" >> $OUT/times.log; }
timeout 90 $J --procs 16 --batch 23 --out $OUT/A1.json; stamp A1
timeout 90 $J --procs 8 --batch 46 --decode-processes 0,2 --out $OUT/A2.json; stamp A2
timeout $(left) $J --procs 16 --batch 23 --busy-network 8 --busy-batch 15 --out $OUT/T1.json; stamp T1
[ $(left) -ge 90 ] && timeout $(left) $J --procs 8 --batch 46 --decode-processes 0,2 \
  --busy-network 8 --busy-batch 15 --out $OUT/T2.json; stamp T2
[ $(left) -ge 70 ] && timeout $(left) $J --procs 16 --batch 23 --busy-network 8 \
  --busy-batch 45 --out $OUT/T3.json; stamp T3
kill $DMON
echo quit | nvidia-cuda-mps-control

# Thirty-fifth session, call 2. Call 1 (../h200-2026-12-04a/next/gpu_times.sh) timed each
# backend call on its lane's stream: the network ~34 ms, the statistics 5-9 ms (a tiny graph and
# small copies), the lane's stream busy nearly all of a push, the SMs ~55 % busy. Are the steps
# waiting for the copy engines, which every process on the GPU shares (the children's and the
# replicas' frame copies, ~20 GB/s)? Here: the GPU tests of the new timing and kernel copies; the
# contention probe as MPS clients (scripts/gpu_copy_contention.py: small steps' times alone,
# beside eight processes of memcpys, beside eight of kernel copies); then eight replicas of one
# lane at 320 sessions with each call's copies and graph timed apart (gpu_net_*, gpu_stats_*),
# the copies as memcpys, then as kernels (TTBALL_KERNEL_COPIES=1).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=560 bash docs/benchmarks/h200-2026-12-04b/copies.sh
# > $OUT/call.log 2>&1. Prediction in ../LOG.md ("Thirty-fifth session").
TOTAL=${TOTAL:-560}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
PYTHONPATH=$PWD:/tmp/site timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/kernels/test_prepost.py -k "overlap or graphed" tests/kernels/test_copies.py \
  > $OUT/tests.log 2>&1; t tests
( export CUDA_MPS_PIPE_DIRECTORY=$W/mps-probe CUDA_MPS_LOG_DIRECTORY=$W/mps-probe-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d
  PYTHONPATH=$PWD timeout 120 python3 scripts/gpu_copy_contention.py --procs 8 --mb 143 \
    --probe-mb 28 --reps 100 --out $OUT/contention.json > $OUT/contention.log 2>&1
  echo quit | nvidia-cuda-mps-control; sleep 2 ); t probe
R memcpy8 260 SESSIONS_8="320" $EIGHT
LEFT=$(left)
[ $LEFT -ge 120 ] && R kernel8 $LEFT SESSIONS_8="320" $EIGHT TTBALL_KERNEL_COPIES=1
finish memcpy8 kernel8

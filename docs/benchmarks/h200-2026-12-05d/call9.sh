#!/usr/bin/env bash
# Forty-ninth session (prepared), for any card, ~1 min, no carry: which CUDA driver call the
# JPEG decode waits in. Every decoder in a process waits for all of its process's GPU work
# (twenty-ninth session, h200-2026-12-03e/diag.sh), which puts the other lane's network into a
# lane's decode (~2.5 ms a push in the six-replica shape, ../h100-2026-12-05d/). torchvision's
# decoder (pytorch/vision decode_jpegs_cuda.cpp) syncs only its own stream, but creates nvJPEG
# with the default allocators (cudaMalloc / cudaFree, cudaHostAlloc / cudaFreeHost), and a free
# waits for the whole device. scripts/gpu_decode_waits.py decodes 1, 2 and 4 frames alone and
# behind 20 ms of another stream's spin kernel under scripts/cuda_wait_probe.c (LD_PRELOAD: the
# driver's synchronizing, allocating and copying calls counted and timed). Predicted: behind,
# the wall time grows ~20 ms and one call's time with it -- cuMemFree or cuMemFreeHost if the
# wait is nvJPEG's buffers (then a decoder given its own allocators would not wait), else
# cuCtxSynchronize or a synchronous copy (cuMemcpy*), which only another process avoids.
# Then the same for the product's `--jpeg-decoder nvjpeg-own` (ttball/kernels/nvjpeg_own.c:
# nvJPEG given stream-ordered allocators of its own, memory pools on, on the JPEG engines) and
# the same decoder on nvJPEG's default backend (`own`): predicted, if the wait is the frees, their
# call takes about as long behind as alone. Then nvjpeg-own's GPU tests (pixels, a progressive
# frame, a bad frame named, the call returning in < 50 ms behind 100 ms of another stream).
#   bash docs/benchmarks/h200-2026-12-05d/call9.sh > $OUT/call.log 2>&1
# (the fifty-first session added nvjpeg-own and its tests; its exit status is the tests')
set -x
for d in nvjpeg nvjpeg-own own; do
  timeout -k 5 120 python3 scripts/gpu_decode_waits.py --decoder $d --batches 1 2 4 \
    --ahead-ms 20 --repeats 3 --out $OUT/waits-$d.json > $OUT/waits-$d.txt 2>&1
  tail -25 $OUT/waits-$d.txt
done
timeout -k 5 180 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_nvjpeg_own.py \
  > $OUT/tests-nvjpeg-own.log 2>&1
status=$?
tail -15 $OUT/tests-nvjpeg-own.log
exit $status

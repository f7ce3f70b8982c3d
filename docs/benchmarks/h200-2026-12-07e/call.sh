#!/usr/bin/env bash
# Sixty-sixth session: one call of about 500 s on whichever card comes (a short device budget).
# H200: triton-fp16-direct beside max-autotune and reduce-overhead (BN folded, FP16,
#   channels_last) at batch 1 and 64 in one `ttball bench` run, the current kernels (the last
#   run of the three together on an H200 was the twelfth session's, kernels of then), then the
#   GPU tests of the registry.
# H100: every GPU test (call34.sh of the sixty-third session; that card's comparison exists).
# Carry [".raywhl/site.tar.xz", ".raywhl/ray-stripped.tar.xz", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-07e/call.sh > $OUT/call.log 2>&1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv > $OUT/gpu.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" >> $OUT/gpu.txt 2>&1
git log -1 --format=%H >> $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if ! grep -q H200 $OUT/gpu.txt; then
  END_S=${END_S:-440} bash docs/benchmarks/h200-2026-12-05d/call34.sh
  exit
fi
C=$(mktemp -d)
BENCH_S=${BENCH_S:-400}  # variants not started after BENCH_S - 40 s are skipped (listed as such)
timeout -k 10 $BENCH_S python3 -m ttball.cli bench --device cuda --out $OUT/versus --cache-dir $C \
  --time-budget $(( BENCH_S - 40 )) --batch 1,64 --warmup 10 --groups 5 --calls 20 --no-warm --variants \
  triton-fp16-direct,compile-max-autotune-fp16-folded-cl,compile-reduce-overhead-fp16-folded-cl \
  > $OUT/versus.log 2>&1
echo "bench rc=$? $(( $(date +%s) - S )) s"
grep -v '^USDT' $OUT/versus.log | tail -25
timeout 80 python3 -m pytest -q -m gpu -p no:cacheprovider tests/backends/test_registry_options.py \
  tests/backends/test_backends.py > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - S )) s"
tail -4 $OUT/tests.log

set -x
export TRITON_CACHE_DIR=/tmp/tcache
T0=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.version.cuda)"; } > $OUT/env.txt 2>&1
python3 -m pytest -q -m gpu tests/backends/test_graph_cache.py > $OUT/tests.log 2>&1
echo "tests $(( $(date +%s)-T0 ))s" >> $OUT/times.txt
timeout 330 python3 scripts/gpu_e2e_procs.py --compile-resize --seconds 6 --out $OUT/lanes.json --rows 1x16x4,2x16x2,1x16x6 --start-timeout-s 150 --budget-s 300 > /tmp/lanes.log 2>&1
echo "lanes $(( $(date +%s)-T0 ))s" >> $OUT/times.txt
timeout 120 python3 scripts/triton_ptx.py --out $OUT/ptx.json --batch 64 > /tmp/ptx.log 2>&1
echo "ptx $(( $(date +%s)-T0 ))s" >> $OUT/times.txt
R=$(( 570 - ($(date +%s)-T0) ))
if [ $R -gt 60 ]; then timeout $R python3 scripts/gpu_kernels.py --out /tmp/kernels-b1.json --stages steps --shape-batches 1 --budget-s $((R-20)) > /tmp/kernels.log 2>&1; gzip -c /tmp/kernels-b1.json > $OUT/kernels-b1.json.gz; fi
echo "kernels $(( $(date +%s)-T0 ))s" >> $OUT/times.txt
tar -czf $OUT/logs.tgz -C /tmp lanes.log ptx.log kernels.log 2>/dev/null
ls -la $OUT

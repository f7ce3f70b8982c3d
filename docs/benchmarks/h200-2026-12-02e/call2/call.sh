set -x
export TRITON_CACHE_DIR=/tmp/tcache
T0=$(date +%s)
timeout 300 python3 scripts/gpu_e2e_procs.py --compile-resize --seconds 6 --out $OUT/lanes2.json --rows 3x16x2,4x16x2,2x16x3 --start-timeout-s 120 --budget-s 270 > /tmp/lanes2.log 2>&1
echo "lanes2 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt
R=$(( 560 - ($(date +%s)-T0) ))
timeout $R python3 scripts/gpu_e2e.py --out $OUT/e2e.json --backend triton-fp16-direct --compile-resize --stages frames,backend,network,profile --batches 16,32 > /tmp/e2e.log 2>&1
echo "e2e $(( $(date +%s)-T0 ))s" >> $OUT/times.txt
tar -czf $OUT/logs.tgz -C /tmp lanes2.log e2e.log 2>/dev/null
ls -la $OUT

set -x
export TRITON_CACHE_DIR=/tmp/tcache
T0=$(date +%s)
timeout 400 python3 scripts/gpu_e2e_procs.py --compile-resize --seconds 6 --out $OUT/lanes3.json --rows 4x16x3,6x16x2,4x32x2,2x16x3 --start-timeout-s 120 --budget-s 370 > /tmp/lanes3.log 2>&1
echo "lanes3 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt
tar -czf $OUT/logs.tgz -C /tmp lanes3.log 2>/dev/null

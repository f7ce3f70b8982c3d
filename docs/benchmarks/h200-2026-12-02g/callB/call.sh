set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
grep -c "Config(32, 4, 3)" ttball/kernels/executor.py .ab/ttball/kernels/executor.py > $OUT/tree.txt
PYTHONPATH=$PWD timeout 120 python3 -m pytest -q -m gpu tests/kernels/test_conv.py > $OUT/tests.log 2>&1; t tests
B() { # tree label run
  (cd $1 && PYTHONPATH=$PWD timeout 150 python3 -m ttball.cli bench --variants triton-fp16-direct --batch 64,1 --no-profile --cache-dir /tmp/bc-$2 --out /tmp/bench/$2-$3 > /tmp/bench/$2-$3.log 2>&1); t bench-$2-$3
}
mkdir -p /tmp/bench
B . m32 1; B .ab main 1; B . m32 2; B .ab main 2
PYTHONPATH=$PWD timeout 150 python3 scripts/gpu_kernels.py --out $OUT/kernels-m32.json --stages steps --shape-batches 64,1 --budget-s 120 > /tmp/bench/kernels.log 2>&1; gzip -f $OUT/kernels-m32.json; t kernels
R=$(( 570 - ($(date +%s)-T0) ))
PYTHONPATH=$PWD timeout $R python3 scripts/gpu_split_streams.py --out $OUT/split.json --batch 64 --splits 1,2,4 > /tmp/bench/split.log 2>&1; t split
tar -czf $OUT/bench.tgz -C /tmp bench
ls -la $OUT

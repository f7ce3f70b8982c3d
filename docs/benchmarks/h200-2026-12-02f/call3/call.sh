set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1; t pip
git log --oneline -1 > $OUT/tree.txt 2>/dev/null; (cd .ab && grep -c stream_configs ttball/kernels/executor.py) >> $OUT/tree.txt
B() { # tree label
  (cd $1 && PYTHONPATH=$PWD timeout 150 python3 -m ttball.cli bench --variants triton-fp16-direct --batch 64,8 --no-profile --cache-dir /tmp/bc-$2 --out /tmp/bench/$2-$3 > /tmp/bench/$2-$3.log 2>&1); t bench-$2-$3
}
mkdir -p /tmp/bench
B . main 1; B .ab stream 1; B . main 2; B .ab stream 2
PYTHONPATH=$PWD:/tmp/site timeout 150 python3 -m pytest -q -m gpu tests/serve/test_device_pipeline.py > $OUT/tests.log 2>&1; t tests-lanes
R=$(( 560 - ($(date +%s)-T0) ))
(cd .ab && PYTHONPATH=$PWD timeout $R python3 scripts/gpu_kernels.py --out $OUT/kernels-ab.json --stages steps --shape-batches 64 --budget-s $((R-20)) > /tmp/bench/kernels-ab.log 2>&1); t kernels-ab
tar -czf $OUT/bench.tgz -C /tmp bench
ls -la $OUT

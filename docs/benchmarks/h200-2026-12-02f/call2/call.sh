set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
[ -d /tmp/site/fastapi ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1; t pip
export PYTHONPATH=$PWD:/tmp/site
timeout 150 python3 scripts/gpu_e2e_procs.py --compile-resize --seconds 6 --out $OUT/procs.json --rows 4x16x2 --start-timeout-s 120 --budget-s 140 > /tmp/procs2.log 2>&1; t procs
timeout 150 python3 scripts/gpu_e2e_procs.py --compile-resize --seconds 6 --decoder nvimgcodec-hw --out $OUT/procs-hw.json --rows 4x16x2 --start-timeout-s 120 --budget-s 140 > /tmp/procs2-hw.log 2>&1; t procs-hw
(cd .ab && PYTHONPATH=$PWD timeout 150 python3 -m pytest -q -m gpu tests/kernels/test_executor.py tests/kernels/test_conv.py > $OUT/tests-ab.log 2>&1); t tests-ab
tar -czf $OUT/logs.tgz -C /tmp procs2.log procs2-hw.log 2>/dev/null

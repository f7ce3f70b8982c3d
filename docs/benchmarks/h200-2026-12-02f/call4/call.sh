set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1; touch /tmp/site/.installed-.whl; t pip
PYTHONPATH=$PWD:/tmp/site timeout 150 python3 -m pytest -q -m gpu tests/serve/test_device_pipeline.py tests/kernels/test_prepost.py > $OUT/tests.log 2>&1; t tests
PYTHONPATH=$PWD timeout 60 python3 scripts/gpu_graph_timeline.py --out $OUT/timeline-b1.json --batch 1 > /tmp/timeline.log 2>&1; gzip -f $OUT/timeline-b1.json; t timeline
export PYTHONPATH=$PWD:/tmp/site
CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 BACKEND=triton-fp16-direct LANES=2 KEEP_GOING=1 COLD_ONLY=1 SESSIONS="16 32 40 48 56 64" DURATION=8 BUDGET_S=230 OUT=/tmp/l2 bash scripts/gpu_serve_loadtest.sh > /tmp/l2.log 2>&1; t lanes2
CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 BACKEND=triton-fp16-direct LANES=1 KEEP_GOING=1 COLD_ONLY=1 SESSIONS="16 32 40 48 56" DURATION=8 BUDGET_S=$(( 565 - ($(date +%s)-T0) )) OUT=/tmp/l1 bash scripts/gpu_serve_loadtest.sh > /tmp/l1.log 2>&1; t lanes1
tar -czf $OUT/serve.tgz -C /tmp l2 l1 l2.log l1.log timeline.log 2>/dev/null
cp /tmp/l2/serve/SUMMARY.md $OUT/SUMMARY-lanes2.md 2>/dev/null; cp /tmp/l1/serve/SUMMARY.md $OUT/SUMMARY-lanes1.md 2>/dev/null
ls -la $OUT

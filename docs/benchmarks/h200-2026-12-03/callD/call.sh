# Twenty-fifth session, call D (calls A and C in one, for a session short of device time):
# `serve --ray` under MPS at 40-56 sessions, then the resident 1x1 kernel's GPU tests and one
# `ttball bench` of it and one of main.
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
TOTAL=${TOTAL:-575}  # seconds for the whole call (less when the session's device time is short)
nvidia-smi > $OUT/smi.txt 2>&1
MPS=1 CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 DIRECT_STREAMS=1 BACKEND=triton-fp16-direct \
  LANES=2 GPUS_PER_REPLICA=0.25 CPUS_PER_REPLICA=3 REPLICAS="4" SESSIONS_4="40 48 56" \
  SESSIONS_PER_CLIENT=32 DURATION=8 BUDGET_S=$(( TOTAL < 520 ? TOTAL - 20 : 370 )) OUT=/tmp/ray bash scripts/gpu_ray_loadtest.sh > /tmp/ray.log 2>&1; t ray
cp /tmp/ray/ray/SUMMARY.md $OUT/SUMMARY-ray.md 2>/dev/null
PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py --quantiles /tmp/ray/ray > $OUT/stages.txt 2>&1
PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py /tmp/ray/ray >> $OUT/stages.txt 2>&1
tar -czf $OUT/ray.tgz -C /tmp ray/ray ray.log 2>/dev/null
HERE=docs/benchmarks/h200-2026-12-03/callC
rm -rf /tmp/res && mkdir -p /tmp/res /tmp/bench && cp -r ttball tests scripts pyproject.toml /tmp/res/
(cd /tmp/res && patch -p1 < "$OLDPWD/$HERE/resident.patch") > $OUT/patch.log 2>&1
[ $(( TOTAL - ($(date +%s)-T0) )) -gt 60 ] && (cd /tmp/res && PYTHONPATH=$PWD timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_pointwise.py tests/kernels/test_sm90_compile.py) > $OUT/tests.log 2>&1; t tests
B() { # tree label run
  (cd $1 && PYTHONPATH=$PWD timeout $4 python3 -m ttball.cli bench --variants triton-fp16-direct --batch 64,1 --no-profile --cache-dir /tmp/bc-$2 --out /tmp/bench/$2-$3 > /tmp/bench/$2-$3.log 2>&1); t bench-$2-$3
}
R=$(( (TOTAL - ($(date +%s)-T0)) / 2 )); [ $R -gt 40 ] && B /tmp/res res 1 $R
R=$(( TOTAL - ($(date +%s)-T0) )); [ $R -gt 40 ] && B . main 1 $R
tar -czf $OUT/bench.tgz -C /tmp bench
ls -la $OUT

# Twenty-sixth session, call 2: the resident 1x1 kernel (h200-2026-12-03/callC/resident.patch)
# against main: its GPU tests, `ttball bench` alternated res, main, res, main (each with its
# own tuning cache, so runs 2 start warm), then scripts/gpu_kernels.py's steps stage on the
# patched tree (every candidate of every step, RES included, at batch 64 and 1).
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
TOTAL=${TOTAL:-580}
nvidia-smi > $OUT/smi.txt 2>&1
HERE=docs/benchmarks/h200-2026-12-03/callC
rm -rf /tmp/res && mkdir -p /tmp/res /tmp/bench && cp -r ttball tests scripts pyproject.toml /tmp/res/
(cd /tmp/res && patch -p1 < "$OLDPWD/$HERE/resident.patch") > $OUT/patch.log 2>&1
(cd /tmp/res && PYTHONPATH=$PWD timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_pointwise.py tests/kernels/test_sm90_compile.py) > $OUT/tests.log 2>&1; t tests
B() { # tree label run limit
  (cd $1 && PYTHONPATH=$PWD timeout $4 python3 -m ttball.cli bench --variants triton-fp16-direct --batch 64,1 --no-profile --cache-dir /tmp/bc-$2 --out /tmp/bench/$2-$3 > /tmp/bench/$2-$3.log 2>&1); t bench-$2-$3
}
B /tmp/res res 1 120; B . main 1 120; B /tmp/res res 2 90; B . main 2 90
L=$(( TOTAL - ($(date +%s)-T0) - 15 ))
[ $L -gt 60 ] && (cd /tmp/res && PYTHONPATH=$PWD timeout $L python3 scripts/gpu_kernels.py --stages steps --shape-batches 64,1 --budget-s $(( L - 30 )) --out /tmp/bench/steps-res.json > /tmp/bench/steps-res.log 2>&1); t steps
tar -czf $OUT/bench.tgz -C /tmp bench
ls -la $OUT

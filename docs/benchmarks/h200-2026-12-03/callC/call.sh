# Twenty-fifth session, call C: the resident 1x1 kernel (branch resident-1x1 as resident.patch
# beside this file, applied to a copy of the tree): its GPU tests, then `ttball bench`
# alternated with main, then each step's candidates alone.
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
HERE=docs/benchmarks/h200-2026-12-03/callC
rm -rf /tmp/res && mkdir -p /tmp/res /tmp/bench && cp -r ttball tests scripts pyproject.toml /tmp/res/
(cd /tmp/res && patch -p1 < "$OLDPWD/$HERE/resident.patch") > $OUT/patch.log 2>&1 || { cat $OUT/patch.log; exit 1; }
(cd /tmp/res && PYTHONPATH=$PWD timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_pointwise.py tests/kernels/test_sm90_compile.py) > $OUT/tests.log 2>&1; t tests
tail -n 5 $OUT/tests.log
B() { # tree label run
  (cd $1 && PYTHONPATH=$PWD timeout 170 python3 -m ttball.cli bench --variants triton-fp16-direct --batch 64,1 --no-profile --cache-dir /tmp/bc-$2 --out /tmp/bench/$2-$3 > /tmp/bench/$2-$3.log 2>&1); t bench-$2-$3
}
B /tmp/res res 1; B . main 1; B /tmp/res res 2; B . main 2
(cd /tmp/res && PYTHONPATH=$PWD timeout 170 python3 scripts/gpu_kernels.py --out $OUT/kernels-res.json --stages steps --shape-batches 64,1 --budget-s 150) > /tmp/bench/kernels.log 2>&1; gzip -f $OUT/kernels-res.json; t kernels
tar -czf $OUT/bench.tgz -C /tmp bench
grep -h "triton-fp16-direct" /tmp/bench/*/bench.md 2>/dev/null | head -20
ls -la $OUT

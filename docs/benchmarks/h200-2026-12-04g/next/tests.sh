# Fortieth session (prepared): the GPU tests of the tuning records (a second backend takes the
# first one's record; a damaged record is tuned again; records=False writes nothing; the first
# call with given configurations against the reference), of the nvcc build lock and of the
# decode children's start, on caches of their own (so records.sh's cold start stays cold).
# No Ray. Run with the first call, after budget.sh: TOTAL=300 bash
# docs/benchmarks/h200-2026-12-04f/next/budget.sh > $OUT/call.log 2>&1; bash
# docs/benchmarks/h200-2026-12-04g/next/tests.sh > $OUT/tests.log 2>&1
export TRITON_CACHE_DIR=/tmp/tests-tcache TTBALL_CACHE_DIR=/tmp/tests-ttball PYTHONUNBUFFERED=1
PYTHONPATH=$PWD timeout 240 python3 -m pytest -q -p no:cacheprovider -rA -s \
  tests/kernels/test_records.py tests/kernels/test_direct.py tests/kernels/test_decode_process.py \
  -k "record or library or building or children_start or on_cuda"

#!/bin/bash
# twenty-first session, call 2: thread-local graph captures, then the lanes rows again
set -x
timeout 150 python3 -m pytest -q -m gpu tests/backends/test_graph_cache.py > $OUT/tests.log 2>&1
tail -3 $OUT/tests.log
timeout 330 python3 scripts/gpu_e2e_procs.py --compile-resize --seconds 6 --out $OUT/lanes.json \
  --rows 1x16x4,2x16x2,1x16x6 --start-timeout-s 200 --budget-s 310 > $OUT/lanes.log 2>&1
tail -5 $OUT/lanes.log

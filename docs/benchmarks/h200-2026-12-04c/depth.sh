# Thirty-sixth session, call 3. Call 2 (stacks.sh, raw in call2/): with the network a lane's
# push is 50 ms against 34 with --backend null, and the difference is postprocess (16.4 against
# 2.9 ms, 73 % of it on the CPU: the lane spinning in cudaEventSynchronize for the previous
# push's statistics) -- the previous push's network, launched ~one push earlier, is not done
# yet on the shared GPU. --pipeline-depth 2 (new) reads back the batches of the push before the
# previous one instead. Here: the GPU tests of depth 2 (the serial rows on CUDA); eight replicas
# of one lane at 320 sessions, depth 1 then depth 2, same call.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=560 bash docs/benchmarks/h200-2026-12-04c/depth.sh
# > $OUT/call.log 2>&1. Prediction in ../LOG.md ("Thirty-sixth session").
TOTAL=${TOTAL:-560}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
PYTHONPATH=$PWD:/tmp/site timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/kernels/test_prepost.py -k "overlap" > $OUT/tests.log 2>&1; t tests
R depth1 260 SESSIONS_8="320" $EIGHT; after depth1
LEFT=$(left)
[ $LEFT -ge 130 ] && { R depth2 $LEFT SESSIONS_8="320" $EIGHT PIPELINE_DEPTH=2; after depth2; }
finish depth1 depth2

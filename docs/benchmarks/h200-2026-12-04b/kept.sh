# Thirty-fifth session, call 3. Call 2 split each call's time on its lane's stream: the network's
# graph ~32 ms, its copies in and out ~1-2 ms, and 6-9 ms for the pipeline's private copy of the
# logits (as a memcpy or as a kernel alike) right after a statistics graph that took ~0 ms; the
# copy engines are not a queue (the probe). The pipeline no longer copies the logits of a backend
# whose outputs are its own (fresh_outputs: a CUDA-graph backend's clones). Here: the GPU tests;
# eight replicas of one lane at 320 sessions without the copy, one lane's pushes 80-89 under
# torch.profiler (TTBALL_PROFILE_PUSHES: its kernels' time on its streams against their span);
# then the same with the copy forced (TTBALL_PIPELINE_CLONE=1), in the same call.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=560 bash docs/benchmarks/h200-2026-12-04b/kept.sh
# > $OUT/call.log 2>&1. Prediction in ../LOG.md ("Thirty-fifth session").
TOTAL=${TOTAL:-560}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
PYTHONPATH=$PWD:/tmp/site timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/kernels/test_prepost.py -k "overlap or graphed or copies_the_logits" \
  > $OUT/tests.log 2>&1; t tests
R kept8 260 SESSIONS_8="320" $EIGHT TTBALL_PROFILE_PUSHES="80:10:$W/prof"
cp $W/prof/summary.json $OUT/profile-summary.json 2>/dev/null
LEFT=$(left)
[ $LEFT -ge 120 ] && R clone8 $LEFT SESSIONS_8="320" $EIGHT TTBALL_PIPELINE_CLONE=1
finish kept8 clone8

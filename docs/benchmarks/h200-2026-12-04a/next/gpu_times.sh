# For the next session (not run yet). The thirty-fourth session found the worker's SMs half idle
# while each lane waits 16-33 ms a push for a network call of ~15 windows, and the same GPU,
# outside the worker, running the decode (~10,000 frames/s) and the network (~3,000 windows/s)
# together with the SMs full (../call2/). This tree times each backend call on its lane's stream
# (GpuPipeline's gpu_between / gpu_normalize / gpu_network / gpu_stats push stages, net % in
# serve_push_costs.py --quantiles). One call: the GPU tests of the timing and of overlap, then
# eight replicas of one lane (call 1's baseline shape: --batches-ahead 1, no --decode-early) at
# 256 / 320 sessions, cold Triton cache; then, if 150 s are left, twelve of one at 320 (does a
# call's gpu_network grow with the calls in flight while the SMs stay half idle?).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=540 bash docs/benchmarks/h200-2026-12-04a/next/gpu_times.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Thirty-fourth session").
TOTAL=${TOTAL:-540}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
PYTHONPATH=$PWD:/tmp/site timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/kernels/test_prepost.py -k "overlap" > $OUT/tests.log 2>&1; t tests
R times8 360 SESSIONS_8="256 320" $EIGHT
LEFT=$(left)
[ $LEFT -ge 150 ] && R times12 $LEFT SESSIONS_12="320" REPLICAS=12 LANES=1 GPUS_PER_REPLICA=0.08 \
  CPUS_PER_REPLICA=1 DECODE_PROCESSES=2 DECODE_AHEAD=1 BATCHES_AHEAD=1
finish times8 times12

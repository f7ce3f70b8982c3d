# For the next session (not run yet). The thirty-eighth session found the worker's pace not
# following its GPU operations (100 empty kernels more a call: no change; the GPU's front end
# took ~5.9 M kernels a second from 24 MPS clients, the worker sends ~50,000). The converse:
# GPU time with few operations. First the GPU tests of the padding, of the CUDA-graph cache and
# of the pipeline against the CPU path (backends.base.capture_graph now captures all three's
# graphs) with the fused statistics now the default (the products now on a
# stream of their own, outside the lane's chain: not yet run on a GPU so) and one graph of 1
# and 10 products timed alone; then eight of one at 320 sessions as they are (cold start, the
# same call's baseline), then with TTBALL_PAD_MATMULS=10 (ten half-precision 4096² products
# with each call, 1.878 ms a replay alone on an H200 in the thirty-eighth session: ~2.8 ms of a
# whole GPU a push, ~0.4 s a second over eight replicas). Chain next/busy3.sh right after it.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=585 bash docs/benchmarks/h200-2026-12-04e/next/busy2.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Thirty-eighth session").
TOTAL=${TOTAL:-585}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
PYTHONPATH=$PWD:/tmp/site timeout 80 python3 -m pytest -q -p no:cacheprovider -m gpu -rA \
  tests/kernels/test_prepost.py -k "pad or matches_the_cpu" > $OUT/tests.log 2>&1
PYTHONPATH=$PWD:/tmp/site timeout 40 python3 -m pytest -q -p no:cacheprovider -m gpu -rA \
  tests/backends/test_graph_cache.py::test_cuda_graphs_read_a_reused_buffer_in_place >> $OUT/tests.log 2>&1
PYTHONPATH=$PWD timeout 30 python3 - >> $OUT/tests.log 2>&1 <<'PY'
import torch
from ttball.kernels.prepost import PadKernels
for m in (1, 10):
    pad = PadKernels(0, torch.device("cuda"), m)
    for _ in range(3):
        pad()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(pad._stream):
        start.record(); [pad._products.replay() for _ in range(20)]; end.record()
    end.synchronize()
    print(f"TTBALL_PAD_MATMULS={m}: {start.elapsed_time(end) / 20:.3f} ms a replay alone")
PY
t tests
R base8 300 SESSIONS_8="320" $EIGHT
after base8
LEFT=$(left)
[ $LEFT -ge 140 ] && { R busy10 $LEFT SESSIONS_8="320" $EIGHT TTBALL_PAD_MATMULS=10; after busy10; }
finish base8 busy10
rm -f $OUT/times.log

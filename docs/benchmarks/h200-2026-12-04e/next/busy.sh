# Thirty-eighth session, its last call (~440 s of device time left): the GPU tests of the
# padding (TTBALL_PAD_MATMULS new), one graph of M 4096² half-precision products timed alone,
# then eight replicas of one lane at 320 sessions with TTBALL_PAD_MATMULS=10 after each call's
# statistics (the statistics now TTBALL_FUSED_WINDOWS=2 by default). Against the same day's
# runs on another machine (6,863-6,954 with level 2): the converse of pad.sh's 100 empty
# kernels -- GPU time with few operations. Run so (call 5), with the products on the lane's
# stream behind its statistics; since then they replay on a stream of their own (next/busy2.sh).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=330 bash docs/benchmarks/h200-2026-12-04e/next/busy.sh
# > $OUT/call.log 2>&1
TOTAL=${TOTAL:-330}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
PYTHONPATH=$PWD:/tmp/site timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu -rA \
  tests/kernels/test_prepost.py -k "fused_windows_and_pad" > $OUT/tests.log 2>&1; t tests
PYTHONPATH=$PWD timeout 30 python3 - > $OUT/pad-time.txt 2>&1 <<'PY'
import torch
from ttball.kernels.prepost import PadKernels
for m in (1, 10):
    pad = PadKernels(0, torch.device("cuda"), m)
    for _ in range(3):
        pad()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); [pad() for _ in range(20)]; end.record(); end.synchronize()
    print(f"TTBALL_PAD_MATMULS={m}: {start.elapsed_time(end) / 20:.3f} ms a replay alone")
PY
t padtime
R busy8 $(left) SESSIONS_8="320" $EIGHT TTBALL_PAD_MATMULS=10
python3 scripts/serve_push_costs.py $W/busy8/ray >> $W/busy8/stages.txt 2>&1
finish busy8
rm -f $OUT/times.log

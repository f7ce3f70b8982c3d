# For the next session (not run yet). The thirty-first session found the worker's ceiling shared
# and unmoved by every lever on the lanes: decode ahead (6,162 against 6,137 frames/s), pushes
# of 32 windows (6,558 against 6,467), six replicas instead of four (6,908 at 256 sessions), with
# the SMs, the JPEG engines and the host each about half busy; a child's decode is ~1.1 ms a
# frame in the worker against 0.63 for 16 MPS clients decoding alone at the engines' cap. Is the
# ceiling the network's GPU time (its kernels in front of everything else under MPS) or the rest
# of the path? Here, in one call:
#  1. serve --ray as in that session (four replicas of two lanes as MPS clients, nvJPEG,
#     --decode-processes 2 --decode-ahead) with --backend null (no network: constant logits) at
#     192 / 256 / 320 sessions;
#  2. the same with triton-fp16-direct at 256 (the machine's own baseline).
# Both with py-spy --gil on one replica (who holds its interpreter lock, SUMMARY-*.md), and the
# host's lscpu (are its 16 CPUs 8 cores of two threads?).
# carry: [".raywhl", ".gpu"] (with .raywhl built by make_raywhl.sh since its binaries are
# stripped, ~39.9 MB, the tree and both carries are ~61 MiB; if the run tool still says over 64
# MiB, remove demo/rally.mp4 and docs/images/synth_examples.png from the working tree for the
# call, then git checkout them). Run: bash docs/benchmarks/h200-2026-12-03g/next/call.sh
# > $OUT/call.log 2>&1 (~520 s).
# Prediction in ../../LOG.md ("Thirty-first session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-560}
source scripts/_loadtest.sh
install_wheels
lscpu > $OUT/lscpu.txt 2>&1  # 16 cores or 8 with two threads each: how busy "60 %" of the host is
source docs/benchmarks/h200-2026-12-03c/_ray.sh
# no Triton kernels to tune: start-up is the resize's compile and the warm-up pushes
SESSIONS_4="192 256 320" R null 260 BACKEND=null DECODE_PROCESSES=2 DECODE_AHEAD=1 PYSPY=1
cp $W/null/stages.txt $OUT/stages-null.txt 2>/dev/null
LEFT=$(( TOTAL - ($(date +%s)-T0) - 10 ))
# a cold Triton cache: 136-210 s to ready (BUDGET_S - 60 is the wait)
[ $LEFT -ge 250 ] && SESSIONS_4="256" R triton $LEFT DECODE_PROCESSES=2 DECODE_AHEAD=1 PYSPY=1
cp $W/triton/stages.txt $OUT/stages-triton.txt 2>/dev/null
cp $W/times.txt $OUT/
tar -czf $OUT/next.tgz --exclude 'next/mps-pipe*' -C /tmp next

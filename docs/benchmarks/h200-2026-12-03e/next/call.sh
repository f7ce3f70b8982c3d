# For the next session (not run yet). Call 3 of the twenty-ninth session: one decode process a
# lane served 7,140 frames/s (5,492 in the lane's process), but the decode stage still took
# 41-43 ms a push of ~40 frames at every load, with the JPEG engines under half busy. Here, in
# one call:
#  0. outside the worker (scripts/gpu_jpeg_procs.py, one process, time slices, batches of 40
#     real frames, nvJPEG): in the process itself, through one and through two decode processes,
#     with 20 ms of matmuls queued ahead on another of its streams, then alone; each row with
#     the children's split; and the CUDA test of DecoderProcess (two children);
# then serve --ray, four replicas of two lanes as MPS clients, nvJPEG, as call 3:
#  1. --decode-processes 1 at 64 and 128 sessions: the decode stage split into decode_child (the
#     child's decode calls), decode_fill (its copies into the shared slot) and decode_transfer
#     (the pipe, the child's scheduling), which call 3 did not have;
#  2. --decode-processes 2 at 128 / 160 / 192: each push's frames split between two children;
#  3. --decode-processes 2 with --jpeg-decoder nvimgcodec-hw at 160.
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03e/next/call.sh
# > $OUT/call.log 2>&1 (~560 s). Prediction in LOG.md ("Twenty-ninth session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-570}
source scripts/_loadtest.sh
install_wheels
G() { timeout 60 python3 scripts/gpu_jpeg_procs.py --video .gpu/real_rally_a.mp4 --batch 40 \
  --seconds 2 --procs 1 --library nvjpeg --out $W/$1.json "${@:2}" >> $W/rows.log 2>&1; t $1; }
G ahead --ahead-ms 20 --decode-processes 0,1,2
G alone --decode-processes 1,2
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_process.py -k cuda \
  > $W/pytest.txt 2>&1; t pytest
grep -h '"procs"' $W/rows.log > $W/rows.jsonl
cp $W/rows.jsonl $W/pytest.txt $OUT/
source docs/benchmarks/h200-2026-12-03c/_ray.sh
SESSIONS_4="64 128" R one 200 DECODE_PROCESSES=1
SESSIONS_4="128 160 192" R two 160 DECODE_PROCESSES=2
LEFT=$(( TOTAL - ($(date +%s)-T0) - 10 ))
[ $LEFT -ge 90 ] && SESSIONS_4="160" R two-hw $LEFT DECODE_PROCESSES=2 DECODER=nvimgcodec-hw
cp $W/times.txt $OUT/
tar -czf $OUT/next.tgz --exclude next/mps-pipe -C /tmp next

# Call 2 of the thirtieth session. Call 1 (../h200-2026-12-03e/next/call.sh, results in call1/)
# split the decode stage of serve --decode-processes 2 (nvimgcodec-hw, 160 sessions): 39.4 ms a
# push, of which decode_child 7.2, decode_fill 12.4 and decode_transfer 19.3 ms -- the pipe,
# not the decoding, is the cost; its two nvJPEG runs never became ready (their start-up budgets
# were too short for a cold Triton cache). Now the JPEG bytes go through a shared-memory inbox
# (DecoderProcess inbox_bytes), only their lengths through the pipe. Here, in one call:
#  0. outside the worker (scripts/gpu_jpeg_procs.py, one process, batches of 40 real frames,
#     nvJPEG, nothing queued ahead): in the process, through one and through two decode
#     processes, each row with the children's split (call 1: transfer 5.0 / 4.2 ms);
#  1. serve --ray, four replicas of two lanes as MPS clients, nvJPEG, --decode-processes 2 at
#     160 / 192 sessions (a start-up budget for a cold Triton cache);
#  2. four lanes a replica, one decode process each, at 160 / 192: smaller pushes, so a shorter
#     decode a push, if the lanes' host work and the GPU leave room.
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03f/call.sh
# > $OUT/call.log 2>&1 (~560 s). Prediction in LOG.md ("Thirtieth session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-570}
source scripts/_loadtest.sh
install_wheels
timeout 60 python3 scripts/gpu_jpeg_procs.py --video .gpu/real_rally_a.mp4 --batch 40 \
  --seconds 2 --procs 1 --library nvjpeg --out $W/alone.json --decode-processes 0,1,2 \
  >> $W/rows.log 2>&1; t alone
grep -h '"procs"' $W/rows.log > $W/rows.jsonl
cp $W/rows.jsonl $OUT/
source docs/benchmarks/h200-2026-12-03c/_ray.sh
SESSIONS_4="160 192" R two 300 DECODE_PROCESSES=2
LEFT=$(( TOTAL - ($(date +%s)-T0) - 10 ))
[ $LEFT -ge 150 ] && SESSIONS_4="160 192" R four-lanes $LEFT DECODE_PROCESSES=1 LANES=4
cp $W/times.txt $OUT/
tar -czf $OUT/next.tgz --exclude next/mps-pipe -C /tmp next

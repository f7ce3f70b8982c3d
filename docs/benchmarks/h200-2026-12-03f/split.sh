# Call 3 of the thirtieth session (~300 s, the session's last device time). Call 2: with the
# bytes through the shared inbox, two decode children a lane still spend ~15 ms a push in
# decode_transfer in the worker (1.6 ms outside it). DecoderProcess now splits the transfer:
# decode_to_child (parent's send -> child holds the request), decode_from_child (child's answer
# -> parent holds it: the pipe, the parent's wake-up, the interpreter lock) and decode_copy_out.
#  1. serve --ray, four replicas of two lanes as MPS clients, nvJPEG, --decode-processes 2 at
#     160 sessions (as call 2), the split in stages.txt;
#  2. if time is left: outside the worker, one and two children alone (the split uncontended).
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03f/split.sh
# > $OUT/split.log 2>&1. Prediction in LOG.md ("Thirtieth session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-300}
source scripts/_loadtest.sh
install_wheels
source docs/benchmarks/h200-2026-12-03c/_ray.sh
SESSIONS_4="160" R split 250 DECODE_PROCESSES=2
cp $W/split/stages.txt $OUT/stages-split.txt
LEFT=$(( TOTAL - ($(date +%s)-T0) - 5 ))
[ $LEFT -ge 45 ] && timeout $LEFT python3 scripts/gpu_jpeg_procs.py --video .gpu/real_rally_a.mp4 \
  --batch 40 --seconds 2 --procs 1 --library nvjpeg --out $W/alone.json --decode-processes 1,2 \
  > $W/rows.log 2>&1; t alone
grep -h '"procs"' $W/rows.log > $OUT/rows.jsonl
cp $W/times.txt $OUT/
tar -czf $OUT/split.tgz --exclude next/mps-pipe -C /tmp next

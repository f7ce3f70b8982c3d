# Call 3 of the thirty-first session. Call 2 (call.sh) raised the batch limit to 32 windows: the
# pushes doubled (~90 frames) and so did their time (~89 ms), 6,558 / 6,754 frames/s at 192 / 256
# sessions against 6,467 with the limit of 16 in the same call: a lane's time grows with its
# frames, mostly in its children's decode (48.7 ms for ~45 frames a child, ~1.1 ms a frame).
#  1. More lanes, not larger ones: six replicas of two lanes (0.16 GPU, 2 CPUs each; 12 lanes,
#     24 decode children), two children a lane and --decode-ahead, at 192 / 256 sessions
#     (four replicas served 6,467-6,547 at 192 in calls 1 and 2).
#  2. With the time left: what 8 / 16 MPS clients decoding batches of 45 frames get from the
#     JPEG engines, alone and beside a process keeping the SMs 45 % busy (scripts/gpu_jpeg_procs.py):
#     the decode rate a child could have in the worker.
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03g/six.sh > $OUT/six.log 2>&1
# (~500 s). Prediction in ../LOG.md ("Thirty-first session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-500}
source scripts/_loadtest.sh
install_wheels
source docs/benchmarks/h200-2026-12-03c/_ray.sh
# six replicas tune into a cold cache: give start-up ~270 s (BUDGET_S - 60)
R six 330 REPLICAS=6 GPUS_PER_REPLICA=0.16 CPUS_PER_REPLICA=2 SESSIONS_6="192 256" \
  DECODE_PROCESSES=2 DECODE_AHEAD=1
cp $W/six/stages.txt $OUT/stages-six.txt 2>/dev/null
export CUDA_MPS_PIPE_DIRECTORY=$W/mps-pipe2 CUDA_MPS_LOG_DIRECTORY=$W/mps-log2
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
J() {  # J TAG [args...]: gpu_jpeg_procs.py rows, if the time allows
  local tag=$1; shift
  local left=$(( TOTAL - ($(date +%s)-T0) - 10 ))
  [ $left -ge 40 ] || return 0
  nvidia-smi dmon -s u -d 1 > $W/dmon-$tag.txt 2>&1 & local d=$!
  timeout $left python3 scripts/gpu_jpeg_procs.py --video .gpu/real_rally_a.mp4 --batch 45 \
    --seconds 3 --library nvjpeg --tag $tag --out $W/$tag.json "$@" > $W/$tag.log 2>&1
  kill $d; t $tag; cp $W/$tag.json $OUT/ 2>/dev/null
}
J mps --procs 8,16
J mps-busy --procs 16 --busy-duty 0.45
echo quit | nvidia-cuda-mps-control
cp $W/times.txt $OUT/
tar -czf $OUT/next.tgz --exclude 'next/mps-pipe*' -C /tmp next

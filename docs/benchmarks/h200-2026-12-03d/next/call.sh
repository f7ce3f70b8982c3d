# For the next session (not run yet). Call 3 found that torchvision's nvJPEG decode waits for its
# own process's GPU work on other streams (26.3 ms a call with 20 ms of matmuls queued ahead,
# 9.7 alone), which undoes the overlap inside a replica. Here, in one call:
#  1. the same --ahead-ms row for nvImageCodec's two decoders (which take the caller's stream)
#     beside nvJPEG's, as MPS clients; then nvJPEG in 1 / 4 / 8 processes and nvimgcodec-hw's
#     ahead row under time slices (no MPS);
#  2. serve --ray, four replicas of two lanes under MPS, with --jpeg-decoder nvimgcodec-hw at
#     64-160 sessions, then nvJPEG at 128 in the same call.
# Needs .raywhl built with NVIMGCODEC=1 (scripts/make_raywhl.sh: nvImageCodec and nvJPEG in its
# site.tar.xz). carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03d/next/call.sh
# > $OUT/call.log 2>&1. Prediction in LOG.md ("Twenty-eighth session").
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-585}
source scripts/_loadtest.sh
install_wheels
P() {  # P TAG [args...]: one gpu_jpeg_procs.py phase, nvidia-smi dmon beside it
  local tag=$1; shift
  nvidia-smi dmon -s u -d 1 > $W/dmon-$tag.txt 2>&1 & local d=$!
  timeout 120 python3 scripts/gpu_jpeg_procs.py --video .gpu/real_rally_a.mp4 --batch 32 --seconds 4 \
    --tag $tag --out $W/$tag.json "$@" > $W/$tag.log 2>&1
  kill $d; t $tag
}
P slices --library nvjpeg --procs 1,4,8
P slices-ahead --library nvimgcodec-hw --procs 1 --ahead-ms 20
export CUDA_MPS_PIPE_DIRECTORY=$W/mps-pipe CUDA_MPS_LOG_DIRECTORY=$W/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
P mps-ahead --library nvimgcodec-hw,nvimgcodec,nvjpeg --procs 1 --ahead-ms 20
echo quit | nvidia-cuda-mps-control; sleep 2; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
grep -h '"procs"' $W/*.log > $W/rows.jsonl
source docs/benchmarks/h200-2026-12-03c/_ray.sh
SESSIONS_4="64 96 128 160" R hw 300 DECODER=nvimgcodec-hw
SESSIONS_4="128" R nvjpeg $(( TOTAL - ($(date +%s)-T0) - 15 ))
cp $W/times.txt $W/rows.jsonl $OUT/
tar -czf $OUT/next.tgz --exclude next/mps-pipe -C /tmp next

# Twenty-ninth session, call 2: what a decode waits for. The first call (03e/call1/, the prepared
# 03d/next/call.sh) found nvImageCodec's two decoders wait behind 20 ms of matmuls queued on
# another stream of their process as torchvision's nvJPEG does (22-26 ms a call against ~10), with
# and without MPS. Here, one process each, 20 ms ahead of every call:
#  - the kind of work ahead: mm (matmuls filling the GPU), small (~20 us element-wise kernels),
#    sleep (one spinning thread: time, not SMs). Waiting behind sleep = a synchronization inside
#    the library; waiting behind mm/small only = its kernels queued behind the others';
#  - the decode stream's priority, 0 and -1 (nvImageCodec decodes on the caller's stream;
#    torchvision's nvJPEG on a pool stream of its own, so for it the priority is a control);
#  - another process keeping the SMs busy 90 % of the time (--busy-duty 0.9) instead;
# without MPS, then the main rows again as MPS clients.
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03e/diag.sh > $OUT/diag.log 2>&1
set -x
export PYTHONUNBUFFERED=1
W=/tmp/diag; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
source scripts/_loadtest.sh
install_wheels
P() {  # P TAG [args...]: one gpu_jpeg_procs.py run, nvidia-smi dmon beside it
  local tag=$1; shift
  nvidia-smi dmon -s u -d 1 > $W/dmon-$tag.txt 2>&1 & local d=$!
  timeout 200 python3 scripts/gpu_jpeg_procs.py --video .gpu/real_rally_a.mp4 --batch 32 \
    --seconds 2 --procs 1 --tag $tag --out $W/$tag.json "$@" > $W/$tag.log 2>&1
  kill $d; t $tag
}
LIBS=nvjpeg,nvimgcodec-hw,nvimgcodec
P alone --library $LIBS
P ahead --library $LIBS --ahead-ms 20 --ahead-kind mm,small,sleep --priority 0,-1
P busy --library nvjpeg,nvimgcodec-hw --busy-duty 0.9
export CUDA_MPS_PIPE_DIRECTORY=$W/mps-pipe CUDA_MPS_LOG_DIRECTORY=$W/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
P mps-ahead --library nvjpeg,nvimgcodec-hw --ahead-ms 20 --ahead-kind mm,sleep --priority 0,-1
P mps-busy --library nvjpeg,nvimgcodec-hw --busy-duty 0.9
echo quit | nvidia-cuda-mps-control; sleep 1
grep -h '"procs"' $W/*.log > $W/rows.jsonl
cp $W/times.txt $W/rows.jsonl $OUT/
tar -czf $OUT/diag.tgz --exclude diag/mps-pipe -C /tmp diag

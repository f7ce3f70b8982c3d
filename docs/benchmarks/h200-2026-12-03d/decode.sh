# Call 3 of the twenty-eighth session: is JPEG decoding the ceiling every replica shares?
# (Calls 1-2: next/lag.sh and next/replicas.sh of h200-2026-12-03c. Eight replicas of one lane
# stop at ~5,100 frames/s like four of two, and at saturation a push's decode takes 57 ms
# against 2 ms below it, while the event loops, the host and the GPU's SMs are far from full.)
# scripts/gpu_jpeg_procs.py: P processes each decoding batches of 32 real frames (JPEG q90,
# 1280x720) in a loop, as MPS clients, then as MPS clients beside a process keeping the SMs
# 40 % busy, then without MPS (time slices); torchvision's nvJPEG (the replicas' decoder) and
# nvImageCodec's hardware-engine decoder. Two rows of one process with 20 ms of matmuls queued
# on another of its streams before each call (a lane's previous push, still running), with a
# fixed batch and with batches that change from call to call (as a replica's pushes do): a
# decode that then takes ~20 ms synchronizes the whole device. nvidia-smi dmon (jpg: the JPEG engines' utilization)
# beside each phase. Carry: .whl (nvImageCodec and nvJPEG wheels), .gpu (the clip).
set -x
export PYTHONUNBUFFERED=1
W=/tmp/dec; mkdir -p $W/site
python3 -m pip install -q --no-index --no-deps --target $W/site .whl/nvidia_*.whl
export PYTHONPATH=$W/site:.
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/machine.txt
python3 -c "import torch, torchvision; print(torch.__version__, torchvision.__version__)" >> $W/machine.txt
P() {  # P TAG [args...]
  local tag=$1; shift
  nvidia-smi dmon -s u -d 1 > $W/dmon-$tag.txt 2>&1 & local d=$!
  timeout 200 python3 scripts/gpu_jpeg_procs.py --video .gpu/real_rally_a.mp4 --batch 32 --seconds 4 \
    --tag $tag --out $W/$tag.json "$@" > $W/$tag.log 2>&1
  kill $d; t $tag
}
export CUDA_MPS_PIPE_DIRECTORY=$W/mps-pipe CUDA_MPS_LOG_DIRECTORY=$W/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
P mps --library nvjpeg --procs 1,4,8
P mps-hw --library nvimgcodec-hw --procs 1,8
P mps-ahead --library nvjpeg --procs 1 --ahead-ms 20
P mps-vary-ahead --library nvjpeg --procs 1 --ahead-ms 20 --vary
P mps-busy --library nvjpeg --procs 8 --busy-duty 0.4
echo quit | nvidia-cuda-mps-control; sleep 2; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
[ -n "${SLICES:-}" ] && P slices --library nvjpeg --procs 1,4,8  # if the device time allows
cat $W/times.txt
grep -h '"procs"' $W/*.log | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['tag'], r['library'], r['procs'], r.get('error') or '%.0f fr/s, call %.1f/%.1f ms' % (r['frames_per_s'], r['call_ms_median'], r['call_ms_p99']))
" | tee $W/rows.txt
cp $W/rows.txt $W/times.txt $OUT/
tar -czf $OUT/dec.tgz --exclude dec/site -C /tmp dec

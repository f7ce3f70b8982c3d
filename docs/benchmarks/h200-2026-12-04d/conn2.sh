# Thirty-seventh session, call 3. Call 2's conn8 (CUDA_DEVICE_MAX_CONNECTIONS=32 in every
# process) never got ready: the deployment failed ~35 s in, its replicas' errors not kept. First
# a probe: N MPS clients at once (the worker has 8 replicas and 16 decode children), each making
# its CUDA context, 12 streams and a kernel on each, at 32 and at 16 queues a client -- which
# fails, and how. Then eight of one at 320 with the largest that worked (Ray's own worker logs
# kept if it fails again), then the same without it if time is left.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=560 bash docs/benchmarks/h200-2026-12-04d/conn2.sh
# > $OUT/call.log 2>&1. Prediction in ../LOG.md ("Thirty-seventh session").
TOTAL=${TOTAL:-560}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
probe() {  # probe N CONN: N clients of one MPS daemon, each with CONN hardware queues
  local pipe=$W/mps-probe; mkdir -p $pipe
  CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_MPS_LOG_DIRECTORY=$pipe nvidia-cuda-mps-control -d
  for i in $(seq $1); do
    CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_DEVICE_MAX_CONNECTIONS=$2 timeout 60 python3 -c "
import sys, time, torch
try:
    x = torch.ones(1 << 20, device='cuda')
    streams = [torch.cuda.Stream() for _ in range(12)]
    for s in streams:
        with torch.cuda.stream(s):
            (x * 2).sum()
    time.sleep(10)  # all clients alive at once
    torch.cuda.synchronize(); print('ok')
except Exception as e:
    print('FAIL', type(e).__name__, str(e).splitlines()[0][:200])
" > $W/probe-$1-$2-$i.txt 2>&1 & sleep 0.3  # staggered, as the replicas start
  done
  wait
  echo "$1 clients, CUDA_DEVICE_MAX_CONNECTIONS=$2: $(cat $W/probe-$1-$2-*.txt | sort | uniq -c | tr '\n' ';')" >> $W/probe.txt
  echo quit | CUDA_MPS_PIPE_DIRECTORY=$pipe nvidia-cuda-mps-control; sleep 2
}
probe 24 32; probe 24 16; probe 24 8
CONN=$(grep -E "=(32|16): +24 ok;$" $W/probe.txt | head -1 | sed -E 's/.*=([0-9]+):.*/\1/')
echo "CONN=${CONN:-none}" >> $W/probe.txt; cp $W/probe.txt $OUT/
if [ -n "$CONN" ]; then
  R conn8 290 SESSIONS_8="320" $EIGHT CUDA_DEVICE_MAX_CONNECTIONS=$CONN; after conn8
  [ -f $W/conn8/ray/metrics-8-320.txt ] || grep -h -iE "error|cuda|connections" /tmp/ray/session_latest/logs/worker-*.err 2>&1 | sort | uniq -c | sort -rn | head -40 > $OUT/conn8-worker-err.txt
  LEFT=$(left); [ $LEFT -ge 130 ] && { R base8 $LEFT SESSIONS_8="320" $EIGHT; after base8; }
fi
finish conn8 base8

#!/usr/bin/env bash
# Does this machine's MPS offer static SM partitions (`nvidia-cuda-mps-control -S`, CUDA 13.1's
# MPS), and how does a client see one? Probes the control daemon's version, starts it with -S in
# a pipe folder of its own, lists the partitions (`lspart`), tries to add one of each syntax the
# documentation suggests (the GPU's index or UUID, a chunk count), and runs a CUDA client in the
# first partition it got (CUDA_MPS_SM_PARTITION) to print the SMs it sees and time a kernel
# against a client outside any partition. Everything it prints goes to $OUT/mps-probe.txt.
# Why: six `serve --ray` replicas at 33 % of the SMs each share every SM (200 % asked of 100),
# and their slow state is the GPU's side in every replica alike (LOG, fifty-ninth session);
# disjoint partitions would take that sharing away.
#   bash scripts/mps_static_probe.sh   (GPU machine; ~20 s)
set -u
: "${OUT:?set OUT}"
P=/tmp/mps-probe; rm -rf $P; mkdir -p $P/pipe $P/log
export CUDA_MPS_PIPE_DIRECTORY=$P/pipe CUDA_MPS_LOG_DIRECTORY=$P/log
{
  nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
  echo "== version"; timeout 10 nvidia-cuda-mps-control -v 2>&1 | head -5
  # the control program's own words on partitions (its commands' syntax, where no manual is)
  echo "== strings"; python3 - "$(command -v nvidia-cuda-mps-control)" <<'PY' 2>&1 | head -40
import re, sys
for s in re.findall(rb"[ -~]{6,}", open(sys.argv[1], "rb").read()):
    if re.search(rb"(?i)partition|chunk|lspart", s):
        print(s.decode())
PY
  echo "== start -d -S"; timeout 10 nvidia-cuda-mps-control -d -S 2>&1; echo "rc $?"
  sleep 1
  ctl() { echo "== $*"; echo "$*" | timeout 10 nvidia-cuda-mps-control 2>&1; echo "rc $?"; }
  ctl lspart
  UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
  for cmd in "sm_partition add 0 1" "sm_partition add $UUID 1" "sm_partition add 0 4"; do
    ctl "$cmd"
  done
  ctl lspart
  cat $P/log/control.log 2>/dev/null | tail -20
} > $OUT/mps-probe.txt 2>&1
# the first partition id lspart shows (a word with a slash, as GPU-uuid/id), if any
PART=$(echo lspart | timeout 10 nvidia-cuda-mps-control 2>/dev/null | grep -o 'GPU-[^ ]*/[^ ]*' | head -1)
echo "== partition for the client: '${PART}'" >> $OUT/mps-probe.txt
client='
import time, torch
p = torch.cuda.get_device_properties(0)
x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
for _ in range(3): x @ x
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(20): x @ x
torch.cuda.synchronize()
print("SMs", p.multi_processor_count, "matmul 8192 fp16 ms", round((time.perf_counter() - t) / 20 * 1e3, 3))
'
{
  echo "== client outside any partition"; timeout 60 python3 -c "$client" 2>&1 | tail -3
  if [ -n "$PART" ]; then
    echo "== client in $PART"; CUDA_MPS_SM_PARTITION=$PART timeout 60 python3 -c "$client" 2>&1 | tail -3
  fi
  echo "== quit"; echo quit | timeout 10 nvidia-cuda-mps-control 2>&1
  tail -20 $P/log/control.log 2>/dev/null; tail -20 $P/log/server.log 2>/dev/null
} >> $OUT/mps-probe.txt 2>&1

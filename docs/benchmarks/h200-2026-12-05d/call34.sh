#!/usr/bin/env bash
# Sixty-third session, any card (H200 or H100), one call of END_S seconds (default 540). A health
# check of main on a GPU: every GPU-marked test in one pytest run (197 tests in 19 files; never
# run together before: each call ran the files its change touched), then `ttball verify` of the
# default GPU backend (triton-fp16-direct) on the real rally with the
# time left (last verified in the forty-fifth session; the code under it has changed since).
# Predicted: every GPU test passes (they passed file by file when their change landed); the
# longest are tests/backends/test_backends.py's torch.compile cases; verify passes (0 flips, p99
# about 0.2-0.35 px, as every Triton variant did).
# Carry [".raywhl/site.tar.xz", ".raywhl/ray-stripped.tar.xz", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call34.sh > $OUT/call.log 2>&1
END_S=${END_S:-540}
START=$(date +%s)
source scripts/_loadtest.sh
install_wheels
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv > $OUT/gpu.txt 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" >> $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
TESTS_S=$(( END_S - 150 ))
timeout -k 10 "$TESTS_S" python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
  --durations=30 --ignore=tests/distributed --ignore=tests/browser tests > "$OUT/tests.log" 2>&1
echo "tests rc=$? $(( $(date +%s) - START )) s"
tail -n 60 "$OUT/tests.log"
LEFT=$(( END_S - ($(date +%s) - START) - 10 ))
if (( LEFT > 60 )); then
  timeout -k 5 "$LEFT" python3 -m ttball.cli verify --backend triton-fp16-direct --device cuda \
    --out "$OUT/verify" .gpu/real_rally_a.mp4 > "$OUT/verify.log" 2>&1
  echo "verify rc=$? $(( $(date +%s) - START )) s"
  tail -n 12 "$OUT/verify.log"
fi

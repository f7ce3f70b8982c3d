#!/usr/bin/env bash
# Forty-sixth session: 64 -> 64's wgmma tiles (with their TMA halos) offered at batch 1
# (WGMMA_MIN_PIXELS_OF emptied: step 1 at full resolution, 147,456 pixels, was Triton-only at
# batch 1). `ttball bench --batch 1` of triton-fp16-direct, this tree ("new") against a copy
# with the old exception put back ("base"), alternated twice, each arm its own cache; then the
# tuner's A/B printing step 1's candidates at batch 1; then, if "new" is faster, ttball verify
# at batch 1 (the batch the tuner now picks step 1's tile for); then each step's time alone at
# batch 1 and 64 (gpu_kernels.py steps) while time is left. Carry `.gpu`:
#   TOTAL=540 OUT=$OUT bash docs/benchmarks/h100-2026-12-05/b1/run.sh > $OUT/call.log 2>&1
set -uo pipefail
: "${OUT:?set OUT}"
TOTAL=${TOTAL:-540}
T0=$(date +%s); left() { echo $(( TOTAL - ($(date +%s) - T0) )); }
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/b1-tcache
ROOT=$PWD
rm -rf /tmp/base && mkdir -p /tmp/base /tmp/b1 && cp -r ttball scripts pyproject.toml /tmp/base/
sed -i 's/^WGMMA_MIN_PIXELS_OF: dict\[tuple\[int, int\], int\] = {}$/WGMMA_MIN_PIXELS_OF: dict[tuple[int, int], int] = {(64, 64): 1 << 19}/' \
  /tmp/base/ttball/kernels/direct.py
grep -n "^WGMMA_MIN_PIXELS_OF" ttball/kernels/direct.py /tmp/base/ttball/kernels/direct.py
bench() {  # arm round
  local dir=$ROOT; [ "$1" = base ] && dir=/tmp/base
  (cd "$dir" && PYTHONPATH="$dir" timeout 200 python3 -m ttball bench --variants triton-fp16-direct \
    --batch 1 --no-profile --cache-dir "/tmp/bc-$1" --out "/tmp/b1/$1-$2" > "/tmp/b1/$1-$2.log" 2>&1)
  echo "$1-$2 rc=$? $(grep -h 'triton-fp16-direct' /tmp/b1/$1-$2/bench.md 2>/dev/null | head -1)"
}
for round in 1 2; do bench new $round; bench base $round; done
export PYTHONPATH=$ROOT TTBALL_CACHE_DIR=/tmp/b1-ttball
timeout -k 5 150 python3 scripts/gpu_branches_ab.py --batches 1 --variants branches+direct \
  --show-steps 0,1,2,3,4,5,6 --show-top 6 --out /tmp/b1/ab.json > /tmp/b1/ab.log 2>&1
echo "A/B rc=$? left $(left)"; grep -E "step [0-6] |ms  \(rel" /tmp/b1/ab.log
NEW=$(python3 - <<'PY'
import json, statistics
def ms(arm):
    out = []
    for r in (1, 2):
        try:
            rows = json.load(open(f"/tmp/b1/{arm}-{r}/bench.json"))["rows"]
            out += [x["median_ms"] for x in rows if x["status"] == "ok"]
        except Exception:
            pass
    return statistics.median(out) if out else float("inf")
print(1 if ms("new") < ms("base") else 0)
PY
)
echo "new faster: $NEW"
if [ "$NEW" = 1 ] && [ "$(left)" -gt 200 ]; then
  S=$(date +%s)
  SKIP_EAGER=1 SKIP_ONNX=1 COMPILE=triton-fp16-direct COMPILE_S=150 BUDGET_S=180 OUT=/tmp/b1 \
    bash scripts/gpu_verify.sh > /tmp/b1/verify.log 2>&1
  echo "verify rc=$? $(( $(date +%s) - S )) s"; cat /tmp/b1/verify/SUMMARY.md
fi
L=$(left)
if [ "$L" -gt 120 ]; then
  timeout $(( L - 20 )) python3 scripts/gpu_kernels.py --stages steps --shape-batches 64,1 \
    --budget-s $(( L - 50 )) --out /tmp/b1/steps.json > /tmp/b1/steps.log 2>&1
  echo "steps rc=$? left $(left)"
fi
tar -czf "$OUT/b1.tgz" -C /tmp b1

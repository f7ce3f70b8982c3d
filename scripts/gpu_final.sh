#!/usr/bin/env bash
# One H200 call for the session's tables: bench (latency, compile, sweep), verify, fusion.
# Everything is packed into $OUT/final.tar.gz; each part runs under its own time budget so the
# packing always happens inside the device tool's 600 s limit.
set -uo pipefail
: "${OUT:?set OUT}"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
W="$(mktemp -d)"
T0=$(date +%s)
say() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
pack() { tar -C "$W" -czf "$OUT/final.tar.gz" . ; cp "$W"/bench/gpu-bench.md "$W"/verify/verify/SUMMARY.md "$OUT"/ 2>/dev/null; say "packed"; }
trap pack EXIT

say "bench"
BUDGET_S="${BENCH_S:-300}" OUT="$W/bench" timeout 330 bash scripts/gpu_bench.sh latency compile sweep > "$W/bench.log" 2>&1
grep "^== " "$W/bench.log"
say "verify"
BUDGET_S="${VERIFY_S:-150}" OUT="$W/verify" timeout 170 bash scripts/gpu_verify.sh > "$W/verify.log" 2>&1
grep -E "^== |exit " "$W/verify.log"
say "fusion"
timeout 70 python3 -m ttball.cli fusion --device cuda --out "$W/fusion" > "$W/fusion.log" 2>&1
echo "fusion rc=$?"; tail -30 "$W/fusion.log"

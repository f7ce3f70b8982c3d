#!/usr/bin/env bash
# Prepared in the forty-second session (not run yet): `ttball bench` of triton-fp16-direct at
# batch 64 and 1 with the tap-partials kernel left out (TTBALL_WGMMA_TAPS=0), as offered now
# (the 6 x 30 tile, cp.async halo) and with the untested candidates offered too (the TMA halo,
# the 6 x 14 tile: TTBALL_DIRECT_NEXT, those whose tests passed), alternated
# twice, each arm with a cache folder of its own (the first run tunes and records, the second
# takes the records): the headline figures in the usual harness (the forty-second session
# measured the kernel with scripts/gpu_branches_ab.py only). ~6-7 min. Run after
# taps-tma/run.sh (its GPU tests) on the same machine; no carry:
#   OUT=$OUT bash docs/benchmarks/h200-2026-12-05/next/bench.sh > $OUT/call.log 2>&1
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
mkdir -p /tmp/bench
bench() {  # arm, its environment setting, round
  env "$2" timeout 170 python3 -m ttball bench --variants triton-fp16-direct --batch 64,1 \
    --no-profile --cache-dir "/tmp/bc-$1" --out "/tmp/bench/$1-$3" > "/tmp/bench/$1-$3.log" 2>&1
  echo "$1-$3 rc=$?"
}
# the candidates whose GPU tests passed in taps-tma/run.sh on this machine (all if it did not run)
NEXT=$(cat /tmp/ttball-direct-next 2>/dev/null || echo 1)
echo "next: ${NEXT:-none passed}"
for round in 1 2; do
  bench off TTBALL_WGMMA_TAPS=0 "$round"
  bench taps TTBALL_WGMMA_TAPS=1 "$round"
  [ -z "$NEXT" ] || bench next "TTBALL_DIRECT_NEXT=$NEXT" "$round"
done
tar -czf "$OUT/bench.tgz" -C /tmp bench
grep -H "triton-fp16-direct" /tmp/bench/*/bench.md | head -24

#!/usr/bin/env bash
# Two jobs side by side on a 2-GPU machine, one per GPU, and everything they wrote as one tar.
#
# Usage (repo root): OUT=/some/dir bash scripts/gpu_pair.sh "JOB FOR GPU 0" "JOB FOR GPU 1"
# Each job runs under bash with CUDA_VISIBLE_DEVICES set and R=/tmp/pair/gpuN, a folder of its
# own for results (give it to the scripts as their OUT). Its output goes to /tmp/pair/gpuN.log.
# At the end: $OUT/pair.tgz holds /tmp/pair, and each log's last lines are printed. The device
# tool brings back at most 8 files from $OUT, two folders deep, hence one tar.
# Example (docs/benchmarks/README.md, "What the next device session should run"):
#   OUT=$OUT bash scripts/gpu_pair.sh 'CACHE=/tmp/bc BUDGET_S=570 OUT=$R bash scripts/gpu_bench.sh nocg_fp32' \
#                                     'BUDGET_S=570 OUT=$R bash scripts/gpu_bench.sh nocg_fp16_23'
# CPU smoke test: OUT=/tmp/x bash scripts/gpu_pair.sh 'echo a > $R/a' 'echo b > $R/b'
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
[ $# -eq 2 ] || { echo "usage: OUT=DIR $0 'JOB FOR GPU 0' 'JOB FOR GPU 1'" >&2; exit 2; }
P=/tmp/pair
rm -rf "$P" && mkdir -p "$P/gpu0" "$P/gpu1" "$OUT"
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" PYTHONUNBUFFERED=1
T0=$(date +%s)
for n in 0 1; do
  job=$([ $n -eq 0 ] && echo "$1" || echo "$2")
  ( export CUDA_VISIBLE_DEVICES=$n R="$P/gpu$n"
    bash -c "$job" > "$P/gpu$n.log" 2>&1
    echo "== gpu$n: exit $? after $(( $(date +%s) - T0 ))s" >> "$P/gpu$n.log" ) &
done
wait
for n in 0 1; do
  echo "== gpu$n: last lines"
  grep -v '^USDT' "$P/gpu$n.log" | tail -n 25
done
tar czf "$OUT/pair.tgz" -C /tmp pair
echo "== $(( $(date +%s) - T0 ))s: $OUT/pair.tgz"

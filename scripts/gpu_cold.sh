#!/usr/bin/env bash
# Issue 9, cold start, on one H200 in one device call of under 10 minutes:
#   1. the GPU tests of the direct kernels (their nvcc + ctypes build, from an empty cache,
#      timed) and of the precompiling pool; stops on a failure (memcheck on one);
#   2. the first call of triton-fp16-branches and -direct at batch 1 with every cache empty
#      (Triton's, ttball's, PyTorch's extensions), once with the tuner's candidates compiled
#      on a thread pool first (the default) and once without (TTBALL_COMPILE_THREADS=0);
#      `ttball bench` reports the first call's seconds and the warm times beside it;
#   3. `ttball track --backend auto` from empty caches (its choice and its time).
# Usage (GPU machine, repo root; carry .gpu): OUT=/some/dir BUDGET_S=560 bash scripts/gpu_cold.sh
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
source scripts/_loadtest.sh  # start_budget, say, left
start_budget 560

fresh() {  # empty caches for the next command
  local d
  d=$(mktemp -d)
  export TRITON_CACHE_DIR="$d/triton" TTBALL_CACHE_DIR="$d/ttball" TORCH_EXTENSIONS_DIR="$d/ext"
}

say "tests (build from an empty cache)"
fresh
t=$(elapsed)
timeout -k 10 240 python3 -m pytest -q -m gpu -p no:cacheprovider \
  tests/kernels/test_direct.py tests/kernels/test_precompile.py \
  > "$OUT/tests.log" 2>&1
rc=$?
tail -n 20 "$OUT/tests.log"
say "tests: rc=$rc after $(( $(elapsed) - t ))s"
if [ "$rc" -ne 0 ]; then
  say "tests failed (rc=$rc): memcheck on one case, then stop"
  timeout -k 10 120 compute-sanitizer --tool memcheck python3 -m pytest -q -m gpu \
    -p no:cacheprovider -x tests/kernels/test_direct.py -k "equals_the_convolution and 16-16" \
    > "$OUT/memcheck.log" 2>&1
  tail -n 40 "$OUT/memcheck.log"
  exit 1
fi

for threads in default 0; do
  for variant in triton-fp16-branches triton-fp16-direct; do
    [ "$(left)" -lt 90 ] && { say "skipped $variant threads=$threads: $(left)s left"; continue; }
    fresh
    if [ "$threads" = 0 ]; then export TTBALL_COMPILE_THREADS=0; else unset TTBALL_COMPILE_THREADS; fi
    name="$variant-threads-$threads"
    limit=$(( $(left) < 200 ? $(left) : 200 ))
    say "$name (limit ${limit}s)"
    timeout -k 10 "$limit" python3 -m ttball.cli bench --device cuda --out "$OUT/$name" \
      --batch 1 --warmup 5 --groups 3 --calls 10 --no-warm --time-budget $(( limit - 30 )) \
      --variants "$variant" > "$OUT/$name.log" 2>&1
    say "$name: rc=$?"
    grep -E "^\| $variant" "$OUT/$name/bench.md" | head -n 1
  done
done
unset TTBALL_COMPILE_THREADS

if [ "$(left)" -gt 100 ] && [ -f .gpu/real_rally_a.mp4 ]; then
  fresh
  say "auto from empty caches (limit $(left)s)"
  ( time timeout -k 10 "$(left)" python3 -m ttball.cli track .gpu/real_rally_a.mp4 \
      --backend auto --device cuda --out "$OUT/track" ) > "$OUT/auto-first.log" 2>&1
  say "auto: rc=$?"
  grep -E "passed|failed|unavailable|device|real" "$OUT/auto-first.log"
  cp "$TTBALL_CACHE_DIR/auto-backend.json" "$OUT/" 2>/dev/null
fi
say "done"

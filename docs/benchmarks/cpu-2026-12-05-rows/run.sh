#!/usr/bin/env bash
# The row wait at step 3, before and after the forty-seventh session's change (a window's rows
# leave when it runs; the third frame no longer waits for the next one), on this 2-core CPU:
# `ttball serve --backend null` (no network: the latency is the window's wait, decode, resize,
# post-processing and the server) from a worktree of the commit before the change (OLD) and
# from this checkout, alternated twice; each `ttball loadtest` 4 sessions x 10 fps for 20 s on
# the real rally. Usage from the repo root: OLD=/tmp/wt_old bash docs/benchmarks/cpu-2026-12-05-rows/run.sh
set -euo pipefail
OUT=${OUT:-docs/benchmarks/cpu-2026-12-05-rows}
CLIP=${CLIP:-../shared/data/real_rally_a.mp4}
PY=$PWD/.venv/bin/python
one() {  # label, source tree, port
  (cd "$2" && PYTHONPATH="$2" exec "$PY" -m ttball serve --backend null --device cpu \
     --torch-threads 1 --port "$3" > "/tmp/rows-$1.log" 2>&1) &
  local pid=$!
  for _ in $(seq 120); do grep -q "ready after" "/tmp/rows-$1.log" && break; sleep 0.5; done
  "$PY" -m ttball loadtest "http://127.0.0.1:$3" --clips "$CLIP" --sessions 4 --fps 10 \
    --duration 20 --out "$OUT/$1.json" | tail -1
  kill -TERM "$pid"; wait "$pid" || true
}
one old1 "$OLD" 8831
one new1 "$PWD" 8832
one old2 "$OLD" 8833
one new2 "$PWD" 8834

#!/usr/bin/env bash
# CPU milliseconds per answered frame of each process on the `serve --ray` path (Serve's proxy,
# the ingress replica, the worker replica, Ray's own daemons), read from /proc before and after
# one `ttball loadtest` run. Which process costs most per frame is the path's first wall: each
# is one Python process with one event loop.
# Runs on the CPU with one replica and the shipped weights at 72x128 (the network is not what
# is measured). Ray needs loopback only; as the Ray tests, run it in a loopback-only network
# namespace: ip netns add lo-only; ip netns exec lo-only ip link set lo up;
#   ip netns exec lo-only bash scripts/ray_hops.sh
# Knobs: SESS (2), FPS (30), DUR (20 s), CLIP (the rally if present, else the demo clip), PORT,
#   DIRECT=1 (serve --direct-streams: the load test's WebSockets go to the replica itself).
# Measured with it: docs/benchmarks/ray-h200.md.
set -u
cd "$(dirname "$0")/.."
[ -x .venv/bin/ttball ] && export PATH="$PWD/.venv/bin:$PATH"
export RAY_USAGE_STATS_ENABLED=0
W="$(mktemp -d)"; SESS="${SESS:-2}"; FPS="${FPS:-30}"; DUR="${DUR:-20}"; PORT="${PORT:-8795}"
CLIP="${CLIP:-}"
for c in .clip/real_rally_a.mp4 ../shared/data/real_rally_a.mp4 demo/rally.mp4; do
  [ -z "$CLIP" ] && [ -f "$c" ] && CLIP="$c"
done
python - "$W/w72.safetensors" <<'PY'
import sys
from ttball.model import load_model, save_checkpoint
m = load_model()
save_checkpoint(sys.argv[1], m, m.config.evolve(name="shipped-72x128", input_height=72, input_width=128))
PY
ttball serve --ray --replicas 1 --gpus-per-replica 0 --cpus-per-replica 1 --backend eager-fp32 --device cpu \
  --weights "$W/w72.safetensors" --warmup-batches 1,2,4 --torch-threads 1 --port "$PORT" \
  $([ -n "${DIRECT:-}" ] && echo --direct-streams) > "$W/server.log" 2>&1 &
SP=$!
for _ in $(seq 240); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.5; done
snap() {  # pid, utime + stime in clock ticks, the command line
  for p in /proc/[0-9]*; do
    c=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null | cut -c1-80); [ -n "$c" ] || continue
    read -r -a st < "$p/stat" 2>/dev/null || continue
    echo "${p#/proc/} $(( st[13] + st[14] )) $c"
  done
}
snap > "$W/before.txt"
ttball loadtest "http://127.0.0.1:$PORT" --clips "$CLIP" --sessions "$SESS" --fps "$FPS" --step 3 \
  --duration "$DUR" --max-frames 120 --deadline-ms 50 --drain-timeout 8 --out "$W/lt.json" > "$W/lt.log" 2>&1
snap > "$W/after.txt"
kill -TERM "$SP"; wait "$SP"
python - "$W" <<'PY'
import json, os, sys
w = sys.argv[1]
hz = os.sysconf("SC_CLK_TCK")
read = lambda name: {l.split(" ", 2)[0]: l.split(" ", 2) for l in open(f"{w}/{name}")}
before, after = read("before.txt"), read("after.txt")
lt = json.load(open(f"{w}/lt.json"))
rows = max(lt["rows"], 1)
print(f"{lt['rows']} rows, {lt['achieved_fps']} rows/s of {lt['offered_fps']} offered")
used = []
for pid, (_, ticks, cmd) in after.items():
    seconds = (int(ticks) - (int(before[pid][1]) if pid in before else 0)) / hz
    if seconds > 0.2:
        used.append((seconds, pid, cmd.strip()))
for seconds, pid, cmd in sorted(used, reverse=True)[:10]:
    print(f"{seconds:7.2f} s  {1000 * seconds / rows:6.2f} ms/frame  {pid:>7}  {cmd}")
PY
rm -rf "$W"

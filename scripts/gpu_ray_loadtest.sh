#!/usr/bin/env bash
# Issue 10 on a 2-GPU machine: `ttball serve --ray` with 1 replica, then 2 replicas (1 GPU each),
# each under `ttball loadtest` at increasing session counts (60 fps, step 3).
#   1. `serve --ray --replicas 1`: time to ready (cold compile cache), loadtest per count, SIGTERM
#   2. `serve --ray --replicas 2`: time to ready (cache of step 1), the same counts, SIGTERM
#   3. SUMMARY.md: rows/s and p50/p95/p99 per replica count and session count
# Writes $OUT/ray/ (server-N.log, ready-N.json, loadtest-N-S.json, metrics-N-S.txt, summary.json,
# SUMMARY.md; per load test also gpu-N-S.csv and gpu-N-S-gpm.txt, the GPU's busy % and GPM
# metrics, cpu-N-S.txt, the host's, and procs-N-S.json, each replica's CPU % and its busiest
# threads: scripts/proc_cpu.py). Every step runs under `timeout`; the whole script stops by BUDGET_S (480 s).
# Usage (GPU machine, repo root; Ray, fastapi, uvicorn importable): OUT=/some/dir bash scripts/gpu_ray_loadtest.sh
# Knobs: DEVICE_PIPELINE=1 (replicas decode on the GPU: serve --device-pipeline), DIRECT_STREAMS=1
#   (serve --direct-streams: the load test's WebSockets go to the replicas, not through the ingress), OVERLAP=1
#   (serve --pipeline-overlap, with DEVICE_PIPELINE=1), MPS=1 (the replicas share the GPU through
#   CUDA MPS, started here before Ray and stopped at the end, instead of time slices; MPS_PCT=50: each
#   replica on at most half of the SMs, as the daemon's default; SM_PERCENT=50: the same through
#   `serve --ray --mps-sm-percent`, set in each replica only), BLOCKING_SYNC=1 (serve
#   --cuda-blocking-sync: waits for the GPU sleep instead of spinning), SWITCH_MS=0.5 (serve
#   --switch-interval-ms: Python's switch interval in each replica), BATCHES_AHEAD (serve
#   --batches-ahead), PIPELINE_DEPTH (serve --pipeline-depth, with OVERLAP=1), STATS_STREAM=1 (serve
#   --stats-stream), MAX_DELAY_MS (serve --max-delay-ms: how long a lane's oldest job waits for
#   company, default 2), FLUSH_THREAD=1 (serve --flush-thread: each lane's flush on a thread of
#   its own; needs CARRY=0), FLUSH_AFTER=1 (serve --flush-after-push: a lane's thread flushes
#   right after its push, in the same hand-off), LIVE=1 (serve --live-settings) with
#   LIVE_<s>='{"flush_after_push": true}' (PUT /v1/admin/settings on every replica before the
#   load of s sessions, the reply kept as live-R-S.json: settings compared under one start, a
#   distinct session count each, e.g. SESSIONS_6="63 64 65 66"), PYSPY=1 (py-spy --gil on one
#   replica during each load test, from .raywhl/: the interpreter lock's holders, in SUMMARY.md;
#   PYSPY=idle: py-spy --idle on one replica and one of its decode children instead, every
#   thread's stacks waiting or not, stacks-R-S.txt and stacks-child-R-S.txt for
#   scripts/stack_report.py), COMPILE_RESIZE=1 (serve --pipeline-compile-resize), RESIZE (serve --pipeline-resize: eager, compile or triton; wins over COMPILE_RESIZE), DECODER (serve --jpeg-decoder), DECODE_PROCESSES (serve --decode-processes), DECODE_AHEAD=1 (serve --decode-ahead), DECODE_EARLY=1 (serve --decode-early), ARRIVAL=1 (serve --decode-on-arrival), CARRY=0 (serve --no-carry-windows), LANES (serve --pipeline-lanes, with DEVICE_PIPELINE=1), GPUS_PER_REPLICA (0.5: two replicas per GPU), SESSIONS_<n> (the session counts for n replicas, instead of SESSIONS), SESSIONS_PER_CLIENT (load-generator processes), BACKEND, BATCHES, SESSIONS, DURATION, CLIP, DECODE_THREADS, CPUS_PER_REPLICA, REPLICAS.
# CPU smoke test of the script itself (no GPU): DEVICE=cpu GPUS_PER_REPLICA=0 BACKEND=eager-fp32 \
#   BATCHES=1,2 SESSIONS="1 2" DURATION=2 REPLICAS="1 2" CPUS_PER_REPLICA=1 OUT=/tmp/x bash scripts/gpu_ray_loadtest.sh
# Estimates (H200 baseline 2026-11-30): reduce-overhead FP16 folded/channels_last compiles in
# 8-13 s per batch size; Ray and Serve start in ~15 s; two replicas compile in parallel.
# Ray and the server's packages: .raywhl/ built by scripts/make_raywhl.sh, carried to the machine.
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
BUDGET_S="${BUDGET_S:-480}"
DEVICE="${DEVICE:-cuda}"
GPUS_PER_REPLICA="${GPUS_PER_REPLICA:-1}"
CPUS_PER_REPLICA="${CPUS_PER_REPLICA:-4}"
BACKEND="${BACKEND:-compile-reduce-overhead-fp16-folded-cl}"
BATCHES="${BATCHES:-1,2,4,8,16}"
SESSIONS="${SESSIONS:-8 32 64}"
REPLICAS="${REPLICAS:-1 2}"
DURATION="${DURATION:-10}"
SESSIONS_PER_CLIENT="${SESSIONS_PER_CLIENT:-16}"  # loadtest processes: one per this many sessions
DECODE_THREADS="${DECODE_THREADS:-8}"
PORT="${PORT:-8710}"
URL="http://127.0.0.1:$PORT"
S="$OUT/ray"
W="$(mktemp -d)"
CACHE="${CACHE:-$W/compile-cache}"  # shared by both runs: the second starts from the first's compile
mkdir -p "$S"
T0=$(date +%s)
source scripts/_loadtest.sh  # install_wheels, elapsed, say, left, fetch, pick_clip
install_wheels || { say "installing the carried wheels failed"; exit 1; }
SERVER_PID=""
SAMPLER_PID=""
# nvidia-smi's utilization.gpu: % of each sample period in which at least one kernel ran (any
# process, MPS clients included) -- a GPU-time busy fraction, not how many SMs were in use. Beside
# it, once a second, Hopper's GPU performance metrics where the driver gives them: 1 graphics
# activity, 2 SM utilization (% of SMs busy), 3 SM occupancy (warps), 10 DRAM bandwidth.
gpu_sampler() {
  SAMPLER_PID=""
  [ "$DEVICE" = cuda ] && command -v nvidia-smi > /dev/null || return 0
  nvidia-smi --query-gpu=timestamp,utilization.gpu,clocks.sm,power.draw --format=csv,noheader,nounits \
    -lms 100 > "$1" 2>/dev/null &
  SAMPLER_PID=$!
  nvidia-smi dmon --gpm-metrics 1,2,3,10 -d 1 > "${1%.csv}-gpm.txt" 2>&1 &
  SAMPLER_PID="$SAMPLER_PID $!"
}
gpu_sampler_stop() {
  for p in $SAMPLER_PID; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  SAMPLER_PID=""
}
cleanup() {
  gpu_sampler_stop
  if [ -n "$SERVER_PID" ]; then kill -TERM "$SERVER_PID" 2>/dev/null; sleep 5; kill -KILL "$SERVER_PID" 2>/dev/null; fi
  [ -n "${MPS:-}" ] && echo quit | nvidia-cuda-mps-control 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

if [ -n "${MPS:-}" ]; then  # every process started from here (Ray's, the replicas) is an MPS client
  export CUDA_MPS_PIPE_DIRECTORY="$W/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$S/mps-log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  # MPS_PCT: each client (replica) may use at most this % of the SMs (the daemon's default)
  [ -n "${MPS_PCT:-}" ] && export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$MPS_PCT"
  nvidia-cuda-mps-control -d || { say "MPS: nvidia-cuda-mps-control -d failed"; exit 1; }
  say "MPS daemon started ($CUDA_MPS_PIPE_DIRECTORY)"
fi

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
# the host: a latency tail differed 2.5x between two H100 machines (forty-seventh session)
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
timeout 60 python3 -c "import torch, ray, fastapi, uvicorn; print('torch', torch.__version__, 'ray', ray.__version__, 'fastapi', fastapi.__version__, 'gpus', torch.cuda.device_count())" || exit 1

say "clip"
pick_clip "$W"

# start N: `serve --ray` with N replicas (a private local Ray cluster); waits for /readyz 200.
# Python itself is the background job, so SIGTERM reaches the CLI (it deletes the app, stops Ray).
start() {
  local n="$1" t=$(date +%s.%N)
  python3 -m ttball.cli serve --ray --replicas "$n" --gpus-per-replica "$GPUS_PER_REPLICA" \
    --cpus-per-replica "$CPUS_PER_REPLICA" --backend "$BACKEND" --device "$DEVICE" --port "$PORT" \
    --warmup-batches "$BATCHES" --compile-cache "$CACHE" --decode-threads "$DECODE_THREADS" \
    --max-queue 1024 --max-sessions 256 $([ -n "${DEVICE_PIPELINE:-}" ] && echo --device-pipeline) \
    $([ -n "${DIRECT_STREAMS:-}" ] && echo --direct-streams) $([ -n "${OVERLAP:-}" ] && echo --pipeline-overlap) \
    $([ -n "${COMPILE_RESIZE:-}" ] && echo --pipeline-compile-resize) \
    $([ -n "${RESIZE:-}" ] && echo --pipeline-resize "$RESIZE") \
    $([ -n "${DECODER:-}" ] && echo --jpeg-decoder "$DECODER") \
    $([ -n "${DECODE_PROCESSES:-}" ] && echo --decode-processes "$DECODE_PROCESSES") \
    $([ -n "${DECODE_AHEAD:-}" ] && echo --decode-ahead) \
    $([ -n "${DECODE_EARLY:-}" ] && echo --decode-early) \
    $([ -n "${ARRIVAL:-}" ] && echo --decode-on-arrival) \
    $([ "${CARRY:-}" = 0 ] && echo --no-carry-windows) \
    $([ -n "${LANES:-}" ] && echo --pipeline-lanes "$LANES") \
    $([ -n "${SM_PERCENT:-}" ] && echo --mps-sm-percent "$SM_PERCENT") \
    $([ -n "${BLOCKING_SYNC:-}" ] && echo --cuda-blocking-sync) \
    $([ -n "${SWITCH_MS:-}" ] && echo --switch-interval-ms "$SWITCH_MS") \
    $([ -n "${BATCHES_AHEAD:-}" ] && echo --batches-ahead "$BATCHES_AHEAD") \
    $([ -n "${PIPELINE_DEPTH:-}" ] && echo --pipeline-depth "$PIPELINE_DEPTH") \
    $([ -n "${STATS_STREAM:-}" ] && echo --stats-stream) \
    $([ -n "${MAX_DELAY_MS:-}" ] && echo --max-delay-ms "$MAX_DELAY_MS") \
    $([ -n "${FLUSH_THREAD:-}" ] && echo --flush-thread) \
    $([ -n "${FLUSH_AFTER:-}" ] && echo --flush-after-push) \
    $([ -n "${LIVE:-}" ] && echo --live-settings) \
    > "$S/server-$n.log" 2>&1 &
  SERVER_PID=$!
  local limit=$(( BUDGET_S - 60 ))  # in elapsed seconds
  # ready = every replica warm and answering (the ingress is ready as soon as one is)
  while ! { fetch "$URL/readyz" > "$S/ready-$n.json" && python3 -c "import json, sys; sys.exit(len(json.load(open(sys.argv[1]))['replicas']) < int(sys.argv[2]))" "$S/ready-$n.json" "$n"; }; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null || [ "$(elapsed)" -gt "$limit" ]; then
      say "$n replica(s): not ready (server gone or budget spent)"; tail -n 40 "$S/server-$n.log"
      return 1
    fi
    sleep 0.5
  done
  timeout 20 python3 - "$n" "$t" "$S/ready-$n.json" <<'PY'
import json, sys, time
n, t0, path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
r = json.load(open(path))
r["time_to_ready_s"] = round(time.time() - t0, 2)
json.dump(r, open(path, "w"), indent=2)
print(f"{n} replica(s): ready in {r['time_to_ready_s']} s; replicas {r['replicas']}; first replica's start-up {r['startup_seconds']}")
PY
}

stop() {  # SIGTERM: the CLI deletes the app and stops its cluster
  local t=$(date +%s)
  kill -TERM "$SERVER_PID"
  timeout 60 tail --pid="$SERVER_PID" -f /dev/null || kill -KILL "$SERVER_PID"
  wait "$SERVER_PID"; local rc=$?
  SERVER_PID=""
  say "server stopped: exit $rc after $(( $(date +%s) - t )) s"
}

for n in $REPLICAS; do
  if [ "$(left)" -lt 120 ]; then say "$n replica(s): skipped, $(left) s left"; break; fi
  say "serve --ray --replicas $n ($BACKEND, batches $BATCHES, $GPUS_PER_REPLICA GPU each)"
  start "$n" || { stop; continue; }
  fetch "$URL/metrics" > "$S/metrics-$n-0.txt"  # after warm-up: serve_push_costs.py's baseline
  counts="SESSIONS_$n"  # SESSIONS_<n>: this replica count's own session counts
  for s in ${!counts:-$SESSIONS}; do
    need=$(( DURATION + 20 ))
    if [ "$(left)" -lt $(( need + 30 )) ]; then say "loadtest $s: skipped, $(left) s left"; break; fi
    live="LIVE_$s"
    if [ -n "${!live:-}" ]; then  # this load's live settings, on every replica (LIVE=1)
      put_json "$URL/v1/admin/settings" "${!live}" > "$S/live-$n-$s.json" \
        || { say "loadtest $s: the live settings ${!live} were refused"; rm -f "$S/live-$n-$s.json"; continue; }
      say "live settings for $s sessions: $(cat "$S/live-$n-$s.json")"
    fi
    say "loadtest: $n replica(s), $s sessions x 60 fps, step 3, ${DURATION} s"
    head -1 /proc/stat > "$S/cpu-$n-$s.txt"  # host CPU busy over the load test (summary)
    gpu_sampler "$S/gpu-$n-$s.csv"  # the GPU's busy % and SM clock every 100 ms (summary)
    python3 scripts/proc_cpu.py snap 'ServeReplica|spawn_main' > "$W/procs-before.json" 2>/dev/null
    GIL_PID=""  # PYSPY=1: who holds one replica's interpreter lock during the load (summary)
    KID_PID=""  # PYSPY=idle: every thread's stacks, waiting or not, of one replica and one of
    # its decode children (scripts/stack_report.py reads stacks-R-S.txt, stacks-child-R-S.txt)
    if [ -n "${PYSPY:-}" ] && command -v py-spy > /dev/null; then
      pid=$(pgrep -f TTBallWorker | head -1)
      if [ "$PYSPY" = idle ]; then
        [ -n "$pid" ] && { py-spy record --idle --threads --nonblocking -r 100 -d "$DURATION" -f raw \
          -o "$S/stacks-$n-$s.txt" --pid "$pid" > "$S/stacks-$n-$s.log" 2>&1 & GIL_PID=$!; }
        kid=$([ -n "$pid" ] && pgrep -P "$pid" -f spawn_main | head -1)
        [ -n "$kid" ] && { py-spy record --idle --threads --nonblocking -r 100 -d "$DURATION" -f raw \
          -o "$S/stacks-child-$n-$s.txt" --pid "$kid" > "$S/stacks-child-$n-$s.log" 2>&1 & KID_PID=$!; }
      else
        # -r 200: the rate scripts/ray_loadtest_summary.py's gil_share assumes
        [ -n "$pid" ] && { py-spy record --gil --threads --nonblocking -r 200 -d "$DURATION" -f raw \
          -o "$S/gil-$n-$s.txt" --pid "$pid" > "$S/gil-$n-$s.log" 2>&1 & GIL_PID=$!; }
      fi
    fi
    timeout -k 5 $(( need + 15 )) python3 -m ttball.cli loadtest "$URL" --clips "$CLIP" --sessions "$s" --processes $(( (s + SESSIONS_PER_CLIENT - 1) / SESSIONS_PER_CLIENT )) \
      --fps 60 --step 3 --duration "$DURATION" --max-frames 120 --deadline-ms 50 --drain-timeout 8 \
      --out "$S/loadtest-$n-$s.json"
    head -1 /proc/stat >> "$S/cpu-$n-$s.txt"
    gpu_sampler_stop
    [ -n "$GIL_PID" ] && wait "$GIL_PID"
    [ -n "$KID_PID" ] && wait "$KID_PID"
    python3 scripts/proc_cpu.py snap 'ServeReplica|spawn_main' > "$W/procs-after.json" 2>/dev/null \
      && python3 scripts/proc_cpu.py diff --json "$W/procs-before.json" "$W/procs-after.json" > "$S/procs-$n-$s.json"
    fetch "$URL/metrics" > "$S/metrics-$n-$s.txt"
  done
  stop
done

say "summary"
timeout 30 python3 scripts/ray_loadtest_summary.py "$S" "$BACKEND" "$BATCHES" "$DURATION"
say "done"

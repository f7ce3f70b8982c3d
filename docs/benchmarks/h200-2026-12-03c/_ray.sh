# Sourced by this folder's calls: R LABEL BUDGET [VAR=VALUE ...] runs `serve --ray` (four
# replicas of two lanes, triton-fp16-direct, the device pipeline, direct streams; as MPS clients
# unless MPS= is given) under `scripts/gpu_ray_loadtest.sh` at $SESSIONS_4 sessions, the
# VAR=VALUEs overriding these defaults, and keeps its whole folder in $W/LABEL. Needs t(), $W.
R() {
  local label=$1 budget=$2; shift 2
  env MPS=1 CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 DIRECT_STREAMS=1 \
    BACKEND=triton-fp16-direct LANES=2 GPUS_PER_REPLICA=0.25 CPUS_PER_REPLICA=3 REPLICAS="4" \
    SESSIONS_4="$SESSIONS_4" SESSIONS_PER_CLIENT=32 DURATION=8 BUDGET_S=$budget "$@" OUT=$W/$label \
    bash scripts/gpu_ray_loadtest.sh > $W/$label.log 2>&1; t $label
  PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py --quantiles $W/$label/ray > $W/$label/stages.txt 2>&1
  # (since the fifty-fifth session) ms a flush by part and the hand-offs, then a load a row
  # (its state's figures, its live settings), under the quantiles
  PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py --flushes $W/$label/ray >> $W/$label/stages.txt 2>&1
  PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py --loads $W/$label/ray >> $W/$label/stages.txt 2>&1
  # (since the fifty-sixth session) each replica's share of each load, its frames a push, its stay
  PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py --replicas $W/$label/ray >> $W/$label/stages.txt 2>&1
  cp $W/$label/ray/SUMMARY.md $OUT/SUMMARY-$label.md 2>/dev/null
}

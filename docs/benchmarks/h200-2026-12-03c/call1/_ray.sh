# Sourced by this folder's calls: R LABEL BUDGET [VAR=VALUE ...] runs `serve --ray` (four
# replicas of two lanes as MPS clients, triton-fp16-direct, the device pipeline, direct streams)
# under `scripts/gpu_ray_loadtest.sh` at $SESSIONS_4 sessions with the extra environment given,
# and copies its summary, readiness, stage costs and raw folder to $OUT. Needs t() and $OUT.
R() {
  local label=$1 budget=$2; shift 2
  env "$@" MPS=1 CACHE=/tmp/scache DEVICE_PIPELINE=1 OVERLAP=1 COMPILE_RESIZE=1 DIRECT_STREAMS=1 \
    BACKEND=triton-fp16-direct LANES=2 GPUS_PER_REPLICA=0.25 CPUS_PER_REPLICA=3 REPLICAS="4" \
    SESSIONS_4="$SESSIONS_4" SESSIONS_PER_CLIENT=32 DURATION=8 BUDGET_S=$budget OUT=/tmp/$label \
    bash scripts/gpu_ray_loadtest.sh > /tmp/$label.log 2>&1; t $label
  cp /tmp/$label/ray/SUMMARY.md $OUT/SUMMARY-$label.md 2>/dev/null
  cp /tmp/$label/ray/ready-4.json $OUT/ready-$label.json 2>/dev/null
  PYTHONPATH=/tmp/site python3 scripts/serve_push_costs.py --quantiles /tmp/$label/ray > $OUT/stages-$label.txt 2>&1
  tar -czf $OUT/$label.tgz -C /tmp $label/ray $label.log 2>/dev/null
}

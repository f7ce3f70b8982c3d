#!/usr/bin/env bash
# The run that made the default weights: train on the H200, then track 20 fresh synthetic clips
# (seed 999, never used in training) and the real rally. Everything lands in $OUT/results.tar.gz.
# Usage (on the GPU machine, repo root): OUT=/some/dir bash scripts/gpu_train.sh [MINUTES]
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
MINUTES="${1:-6.5}"
LR="${LR:-2e-3}"
WORKERS="${WORKERS:-14}"  # data workers render clips on the CPU: the limit, not the GPU
SEED="${SEED:-0}"  # the training seed (initialisation, data order)
SYNTH_SEED="${SYNTH_SEED:-1}"  # the synthetic clip stream: a new one gives a fine-tune fresh clips
INIT_ARGS=()
[ -n "${COMPILE:-}" ] && INIT_ARGS+=(--compile)  # torch.compile the training step
[ -n "${INIT:-}" ] && INIT_ARGS+=(--init "$INIT")  # fine-tune from earlier weights
W="$(mktemp -d)"
T0=$(date +%s)
step() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
tt() { python3 -m ttball.cli "$@"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, cv2; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cv2', cv2.__version__)"
nproc

step "train ($MINUTES min budget)"
timeout 600 python3 -m ttball.cli train --out "$W/run" --steps 40000 --batch 32 --lr "$LR" "${INIT_ARGS[@]}" \
  --workers "$WORKERS" --windows-per-clip 64 --seed "$SEED" --synth-seed "$SYNTH_SEED" --max-minutes "$MINUTES" --checkpoint-every 1000 \
  --device cuda --quiet --profile 500
python3 -c "import json,sys; d=json.load(open('$W/run/train.json')); d.pop('history'); print(d)"
cp "$W/run/weights.safetensors" "$W/run/train.json" "$OUT/" 2>/dev/null  # first, in case a later step runs out of time

step "20 evaluation clips, seed 999"
tt synth "$W/eval" --clips 20 --seed 999 --workers "$WORKERS" | tail -1
mkdir -p "$W/pred"
# One process for all 20 clips, on the reference backend (`ttball track` defaults to --backend
# auto, which would benchmark and verify backends first).
timeout 240 python3 - "$W/run/weights.safetensors" "$W/eval" "$W/pred" <<'PY'
import sys
from pathlib import Path

from ttball.model import load_model
from ttball.pipeline import track
from ttball.results import write_track_csv

model = load_model(sys.argv[1])
for video in sorted(Path(sys.argv[2]).glob("clip_*.mp4")):
    out = Path(sys.argv[3]) / video.stem
    out.mkdir(parents=True, exist_ok=True)
    result = track(video, model=model, backend="eager-fp32", device="cuda", batch=16)
    write_track_csv(out / "track.csv", result.rows)
    print(video.stem, result.summary()["visible_pct"], "% visible", flush=True)
PY
if [ -f .gpu/real_rally_a.mp4 ]; then
  step "real rally"
  tt track .gpu/real_rally_a.mp4 --weights "$W/run/weights.safetensors" --backend eager-fp32 \
    --device cuda --batch 16 --out "$W/real" --overlay
  tt track .gpu/real_rally_a.mp4 --weights "$W/run/weights.safetensors" --backend eager-fp32 \
    --device cuda --batch 16 --out "$W/real_step1" --step 1 --quiet
fi
if [ -n "${SMOKE:-}" ]; then
  step "smoke: bench + fusion on cuda"
  timeout 150 python3 -m ttball.cli bench --device cuda --quick --batch 1 \
    --variants eager-fp32,eager-fp16,folded-fp16-cl,cudagraph-fp16,compile-reduce-overhead-fp16-folded-cl \
    --out "$W/bench" 2>&1 | tail -25
  timeout 90 python3 -m ttball.cli fusion --device cuda --out "$W/fusion" 2>&1 | tail -25
fi
if [ -n "${FUSION:-}" ]; then
  step "fusion lab on cuda (FP32, TF32 off)"
  timeout 150 python3 -m ttball.cli fusion --device cuda --out "$W/fusion" 2>&1 | tail -40
fi
step "pack"
rm -f "$W"/eval/*.mp4 "$W/run/last.pt"
tar -C "$W" -czf "$OUT/results.tar.gz" run eval pred real real_step1 $(cd "$W" && ls -d bench fusion 2>/dev/null) 2>/dev/null || tar -C "$W" -czf "$OUT/results.tar.gz" run eval pred
ls -la "$OUT"
step "done"

#!/usr/bin/env bash
# Issue 5 on the H200: verify the optimized variants against eager-fp32 before any is switched on.
# Clips: 5 synthetic rallies made here (seed 4242, 90 frames, 1280x720, with ground truth) and, if
# present, .gpu/real_rally_a.mp4 (117 frames, no ground truth; at most MAX_FRAMES of it).
# Reports: $OUT/verify/<variant>/{verify.json,verify.md,images/}; the table: $OUT/verify/SUMMARY.md.
# A report is rewritten after every clip, so a step cut short by its timeout leaves one marked
# INCOMPLETE in the table rather than nothing.
# Each verify runs under `timeout`, capped so the whole script stays within BUDGET_S (235 s).
# Usage (GPU machine, repo root): OUT=/some/dir bash scripts/gpu_verify.sh
# (A CPU smoke test of the script itself: DEVICE=cpu MAX_FRAMES=6 NCLIPS=2 OUT=... bash ...)
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
BUDGET_S="${BUDGET_S:-235}"
DEVICE="${DEVICE:-cuda}"
MAX_FRAMES="${MAX_FRAMES:-300}"  # per clip: bounds the real rally (the synthetic clips have 90)
ONNX_FRAMES="${ONNX_FRAMES:-30}"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
V="$OUT/verify"
mkdir -p "$V"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
step() { echo "== [$(elapsed)s] $*"; }
# timeout for a step: its own limit, or what is left of the budget if that is less
limit() { local left=$(( BUDGET_S - $(elapsed) - 8 )); (( left < $1 )) && echo "$left" || echo "$1"; }

# `ttball verify` with the onnxrt backends registered and the command listed, whether or not the
# lead has wired both into ttball/backends/__init__.py and ttball/cli/__init__.py yet.
cat > "$W/tv.py" <<'PY'
import sys

import ttball.backends  # noqa: F401
try:
    import ttball.backends.onnxrt  # noqa: F401
except Exception as exc:  # noqa: BLE001
    print(f"onnxrt backends unavailable: {exc}", file=sys.stderr)
from ttball.cli import COMMANDS, main

COMMANDS.setdefault("verify", ("ttball.cli.verify", "verify a backend against the reference"))
sys.exit(main(["verify", *sys.argv[1:]]))
PY
tv() {  # tv SECONDS ARGS...: one verify under timeout; prints its exit code and time
  local t; t=$(limit "$1"); shift
  if (( t < 20 )); then echo "   skipped: time budget spent"; return; fi
  local s=$(date +%s)
  timeout -k 5 "$t" python3 "$W/tv.py" "$@"
  echo "   exit $? after $(( $(date +%s) - s ))s (timeout ${t}s; 0 pass, 1 fail, 2 bad input/unavailable, 124 timeout)"
}

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, cv2, onnxruntime as o; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cv2', cv2.__version__, 'ort', o.__version__)"
nproc

step "5 synthetic clips (seed 4242, 90 frames)"
timeout 90 python3 -m ttball.cli synth "$W/clips" --clips 5 --seed 4242 --frames 90 | tail -1
CLIPS=("$W"/clips/clip_*.mp4)
CLIPS=("${CLIPS[@]:0:${NCLIPS:-5}}")
REAL=()
if [ -f .gpu/real_rally_a.mp4 ]; then
  REAL=(.gpu/real_rally_a.mp4)
else
  echo "   .gpu/real_rally_a.mp4 absent: synthetic clips only"
fi
keep_summary() { for f in "$V"/summary.json "$V"/summary.md; do [ -f "$f" ] && mv "$f" "${f%.*}-$1.${f##*.}"; done; }

EAGER=eager-fp16,eager-bf16,eager-fp16-autocast,eager-bf16-autocast,eager-fp32-cl,eager-fp16-cl
EAGER+=,folded-fp32,folded-fp16,folded-bf16,folded-fp16-cl
EAGER+=,cudagraph-fp32,cudagraph-fp16,cudagraph-fp16-folded-cl
EAGER+=,eager-bf16-cl,eager-fp16-autocast-cl,eager-fp32-cudnnbench,eager-fp16-cudnnbench
EAGER+=,eager-fp16-autocast-cudnnbench,folded-fp32-cl
if [ -z "${SKIP_EAGER:-}" ]; then
  step "eager / folded / cudagraph variants (one process; the reference runs once per batch)"
  tv 180 --backend "$EAGER" --device "$DEVICE" --max-frames "$MAX_FRAMES" --out "$V" --images "${CLIPS[@]}" "${REAL[@]}"
  keep_summary eager
fi

# COMPILE: the torch.compile variants to verify, each under COMPILE_S seconds (max-autotune
# compiles for about two minutes per batch size, so give it its own longer run).
COMPILE="${COMPILE:-compile-reduce-overhead-fp16-folded-cl compile-default-fp16-folded-cl}"
for v in $COMPILE; do
  step "$v (compiles on its first call)"
  tv "${COMPILE_S:-75}" --backend "$v" --device "$DEVICE" --max-frames "$MAX_FRAMES" --out "$V/$v" --images "${CLIPS[@]}" "${REAL[@]}"
done

# onnxrt-fp32-tuned is left out: it differs from onnxrt-fp32 only in thread spinning, not numerics.
[ -z "${SKIP_ONNX:-}" ] && step "ONNX Runtime on CPU (reference on $DEVICE; first $ONNX_FRAMES frames of 3 synthetic clips)"
[ -z "${SKIP_ONNX:-}" ] && tv 60 --backend onnxrt-fp32,onnxrt-int8 --device cpu --reference-device "$DEVICE" \
  --max-frames "$ONNX_FRAMES" --out "$V" --images "${CLIPS[@]:0:3}"
[ -z "${SKIP_ONNX:-}" ] && keep_summary onnxrt

step "summary"
python3 - "$V" <<'PY'
import json, sys
from pathlib import Path

root = Path(sys.argv[1])
rows = []
for path in sorted(root.glob("*/verify.json")):
    r = json.loads(path.read_text())
    det, trk, hm = r["overall"]["detections"], r["overall"]["track"], r["overall"]["heatmaps"]
    gt = r["ground_truth"] or {}
    f1 = lambda side: (gt.get(side) or {}).get("f1")
    verdict = "PASS" if r["passed"] else "FAIL" if r.get("complete", True) else "INCOMPLETE"
    clips = f"{r['settings'].get('clips_done')}/{r['settings'].get('clips_total')}"
    rows.append([r["candidate"], r["settings"]["candidate_device"], verdict, clips,
                 det["flips"], trk["visibility_flips"], det["both_visible"],
                 det["position_diff_px"]["p99"], det["position_diff_px"]["max"],
                 f"{hm['peak_moved_with_ball']}/{hm['with_ball']}", hm["logit_rel"], hm["prob_max_abs"],
                 f1("reference"), f1("candidate"), round(r["overall"]["seconds"]["candidate"], 2)])
for path in sorted(root.glob("summary-*.json")):
    for r in json.loads(path.read_text()):
        if r["status"] == "unavailable":
            rows.append([r["candidate"], "-", "UNAVAILABLE"] + ["-"] * 11 + [r["reason"][:60]])
head = ["variant", "device", "verdict", "clips", "flips", "track flips", "both vis", "p99 px", "max px",
        "peak moved", "logit rel", "prob max", "F1 ref", "F1 cand", "cand s"]
fmt = lambda v: "-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)
lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
text = "\n".join(lines)
(root / "SUMMARY.md").write_text("# Verification against eager-fp32\n\n" + text + "\n")
print(text)
PY
ls "$V"
step "done"

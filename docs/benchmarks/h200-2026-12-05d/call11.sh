#!/usr/bin/env bash
# Fifty-first session (prepared), for any card, one call of up to END_S seconds (default 585):
# call9.sh (which driver call each decoder waits in; nvjpeg-own's GPU tests), then, only if
# those tests pass, call10.sh (nvjpeg against nvjpeg-own, six replicas, 64 sessions) in the
# seconds left. Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call11.sh > $OUT/call.log 2>&1
END_S=${END_S:-585}
START=$(date +%s)
if ! bash docs/benchmarks/h200-2026-12-05d/call9.sh; then
  echo "call11: nvjpeg-own's GPU tests failed; no A/B" >&2
  exit 1
fi
TOTAL=$(( END_S - ($(date +%s) - START) )) bash docs/benchmarks/h200-2026-12-05d/call10.sh

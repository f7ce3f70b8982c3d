#!/usr/bin/env bash
# Fifty-third session (prepared), any card, one call of END_S seconds (default 440, >= 150 for
# the first run on a fresh machine; on an H200 the wait probe takes ~45 s of it first). At 64
# sessions, six replicas of two lanes at 33 % with the batcher's wait for company at its
# default (`--max-delay-ms 2`: `six`, `sixb`) against none (`six0`, `six0b`), alternated, then
# 1 ms (`six1`). Why: on the quiet H100 of
# ../h100-2026-12-06b/ the client's p99 (48.3-50.2 ms) is 33.3 ms of a window's frames arriving
# plus the server's stay (p99 18.5-19.4: queue ~9, push ~9.6), and a lane's push costs ~2.3 ms a
# frame at 2.0 or 2.9 frames a push (little fixed cost), so waiting up to 2 ms for a second
# frame buys a lane almost nothing and costs the frame its wait: a lane gets a frame every ~3 ms
# at this load, so about half of the pushes started from idle wait the whole 2 ms. A queue model
# (`python scripts/lane_queue_model.py --sigma 0.25`, calibrated on that H100: 2.24 frames a
# push, stay mean 8.2 / p99 17.5 ms at 2 ms against the measured 2.0, 9.1 / 18.6) gives at 0 ms
# 1.32 frames a push and a stay of 4.9 / 12.0; with a fixed 1 ms a push (`--fixed-ms 1
# --per-frame-ms 1.8`) 1.49 frames, 6.1 / 15.3, the lanes 8 points busier. Predicted for
# `six0`: frames a push 2.0 -> 1.3-1.5, the server's stay p99 3-6 ms shorter and the client's
# p99 with it (43-47 ms where `six` gives ~49-50); `six1` between. If the lanes' busy % rises
# by much more than 8 points (a larger fixed cost a push), p99 may rise instead. (The model
# gives lanes that share one queue no more than 0 ms does: not worth building.) Read each
# summary's CPU stolen since boot first: above ~0.1 % the host is not the one to compare with.
# Carry [".raywhl", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call17.sh > $OUT/call.log 2>&1
# On an H200 (never probed), call9.sh's wait probe first (~45 s, returned as waits.tgz): does
# torchvision's nvJPEG wait for another stream's kernel there, as the twenty-ninth session found?
END_S=${END_S:-440}
START=$(date +%s)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p /tmp/waits
  OUT=/tmp/waits bash docs/benchmarks/h200-2026-12-05d/call9.sh
  tar -czf $OUT/waits.tgz -C /tmp waits
fi
TOTAL=$(( END_S - ($(date +%s) - START) ))
S6=64 S8=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN six 100 "${SIX[@]}"
RUN six0 80 "${SIX[@]}" MAX_DELAY_MS=0
RUN sixb 80 "${SIX[@]}"
RUN six0b 80 "${SIX[@]}" MAX_DELAY_MS=0
RUN six1 80 "${SIX[@]}" MAX_DELAY_MS=1
finish $RUNS

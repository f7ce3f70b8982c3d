#!/usr/bin/env bash
# Forty-ninth session (prepared), for any card, ~3 min: where a lane's fixed cost a push goes
# in the six-replica shape (call5: 2.25-2.40 ms of lane time a frame at 2.3-2.8 frames a push;
# LOG.md "a push's fixed host cost", ~1.5 ms a push counted). One run of six replicas of two
# lanes at 33 % of the SMs, 64 sessions, one lane's pushes 400-409 profiled WITHOUT Python
# stacks (call3's stacks recorded the whole replica and it fell behind), then the report: the
# thread's time in calls against gaps, the process's GPU operations a push. Predicted: the
# thread in calls ~60-70 % of the span (the CPU share of decode and preprocess), a few tens of
# GPU operations a push. Carry [".raywhl", ".gpu"]:
#   TOTAL=200 bash docs/benchmarks/h200-2026-12-05d/call7.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-200}
S6=64 source docs/benchmarks/h200-2026-12-05d/_six.sh
RUN prof6 90 "${SIX[@]}" TTBALL_PROFILE_PUSHES="400:10:$W/prof"
PYTHONPATH=/tmp/site:. python3 scripts/push_profile_report.py $W/prof/trace.json.gz \
  --pushes 10 > $OUT/prof.txt 2>&1
cp $W/prof/summary.json $OUT/prof-summary.json 2>/dev/null
finish $RUNS

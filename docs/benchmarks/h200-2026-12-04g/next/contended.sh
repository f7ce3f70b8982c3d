# Fortieth session (prepared): right after records.sh, on the same machine (its caches in
# /tmp). Records are tuned by one replica alone on the GPU; before, each replica tuned among
# the other seven's launches. Whether the choices made alone serve as well when eight
# replicas' kernels co-run under MPS is not known: `contended` turns the records off
# (TTBALL_TUNING_RECORDS=0: every replica tunes every size at once, Triton's cache and the
# kernels' library warm, as the thirty-ninth session's primed runs did), then `warm2` takes the
# records again; with records.sh's `warm` the order is warm, contended, warm2. A fresh machine
# (no /tmp/rcache/tuning) gets a cold start with records first (`cold2`, another sample of it).
# carry: [".raywhl", ".gpu"]. Run: TOTAL=480 bash docs/benchmarks/h200-2026-12-04g/next/contended.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Fortieth session").
TOTAL=${TOTAL:-480}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
RUNS=""
if [ ! -d /tmp/rcache/tuning ]; then  # a fresh machine: the records first
  R cold2 270 SESSIONS_8="320" $EIGHT CACHE=/tmp/rcache; after cold2; RUNS="cold2"
fi
R contended 200 SESSIONS_8="320" $EIGHT CACHE=/tmp/rcache TTBALL_TUNING_RECORDS=0
after contended; RUNS="$RUNS contended"
LEFT=$(left)
[ $LEFT -ge 150 ] && { R warm2 $LEFT SESSIONS_8="320" $EIGHT CACHE=/tmp/rcache; after warm2; RUNS="$RUNS warm2"; }
python3 docs/benchmarks/h200-2026-12-04g/next/ready.py $W/*/ray/ready-8.json >> $W/times.txt 2>&1
finish $RUNS

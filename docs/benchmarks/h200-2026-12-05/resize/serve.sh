# Forty-third session (prepared; no device was lent that session): eight `serve --ray`
# replicas of one lane (the thirty-third session's shape, two decode children each) with the
# resize compiled (today's runs: COMPILE_RESIZE=1) against the Triton kernel reading each
# decode call's frames in place and the lookup kernel normalising (RESIZE=triton), alternated on warm caches and tuning records,
# 320 sessions for 8 s each. On a fresh machine the first run starts cold: it also measures the
# cold start with the decode children started beside the warm-up and the first replica's
# pipeline warm-up alone (forty-second session's, built on the CPU; supersedes
# h200-2026-12-04g/next/records.sh for that), and the warm runs their warm start.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=590 bash docs/benchmarks/h200-2026-12-05/resize/serve.sh
# > $OUT/call.log 2>&1. Predictions in ../../LOG.md ("Forty-second session", last parts; and
# "Forty-third session").
TOTAL=${TOTAL:-590}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
RUNS=""
run() {  # run LABEL BUDGET [VAR=VALUE ...]
  local label=$1; shift
  R "$label" "$@" SESSIONS_8="320" $EIGHT CACHE=/tmp/rcache
  after "$label"; RUNS="$RUNS $label"
}
if [ ! -d /tmp/rcache/tuning ]; then  # a fresh machine: every cache empty
  rm -rf /tmp/rtcache /tmp/rttball
  run cold 270
fi
for label in triton compile triton2 compile2; do
  LEFT=$(left)
  [ "$LEFT" -ge 110 ] || break
  case $label in
    triton*) run $label $LEFT RESIZE=triton ;;
    *) run $label $LEFT ;;
  esac
done
python3 docs/benchmarks/h200-2026-12-04g/next/ready.py $W/*/ray/ready-8.json >> $W/times.txt 2>&1
finish $RUNS

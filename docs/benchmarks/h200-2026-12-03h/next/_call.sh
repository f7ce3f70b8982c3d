# Sourced by this folder's calls (set TOTAL, the call's seconds, first): the preamble every
# call has run since h200-2026-12-03c -- set -x, the caches, W=/tmp/next, t LABEL (seconds
# since the start, into times.txt), the carried wheels installed, R from ../../h200-2026-12-03c/_ray.sh
# -- and finish LABEL... (each run's stages.txt, times.log and the whole folder as next.tgz
# into $OUT). left (the seconds of TOTAL still free, less 10) is scripts/_loadtest.sh's, on
# BUDGET_S set here: a left() of this file's own was overridden by that file's (the 33rd
# session's first call skipped its second run on it: LEFT=-235). Also EIGHT (the
# settings of eight replicas of one lane, the thirty-third session's shape, for R) and after
# LABEL (serve_push_costs.py's host-ms table appended to that run's stages.txt), which the
# calls since h200-2026-12-03i each wrote out.
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
finish() {
  for l in "$@"; do cp $W/$l/stages.txt $OUT/stages-$l.txt 2>/dev/null; done
  cp $W/times.txt $OUT/times.log
  tar -czf $OUT/next.tgz --exclude 'next/mps-pipe*' -C /tmp next
  # at most 8 files come back, the first by name (SUMMARY-* before next.tgz): past 8 the runs'
  # own copies go, next.tgz holds them (the fifty-second session lost a call's next.tgz so)
  if [ "$(ls $OUT | wc -l)" -gt 8 ]; then rm -f $OUT/SUMMARY-*.md $OUT/stages-*.txt; fi
}
source scripts/_loadtest.sh
BUDGET_S=$(( TOTAL - 10 ))  # _loadtest.sh's left(): BUDGET_S less the seconds since T0
install_wheels
source docs/benchmarks/h200-2026-12-03c/_ray.sh
EIGHT="REPLICAS=8 LANES=1 GPUS_PER_REPLICA=0.12 CPUS_PER_REPLICA=1.5 DECODE_PROCESSES=2 DECODE_AHEAD=1 BATCHES_AHEAD=1"
after() { python3 scripts/serve_push_costs.py $W/$1/ray >> $W/$1/stages.txt 2>&1; }
# RUN LABEL MIN [VAR=VALUE ...]: R with the seconds left if at least MIN are, and LABEL added to
# $RUNS (for finish) when it ran (the forty-seventh session's calls)
RUNS=""
RUN() {
  local label=$1 min=$2 l; shift 2
  l=$(left); [ "$l" -ge "$min" ] && [ "$l" -ge 135 ] || return 0  # gpu_ray_loadtest.sh runs
  # nothing with < 120 s of its budget left after its own 10
  R "$label" "$l" "$@"
  RUNS="$RUNS $label"
}

# Sourced by this folder's calls (set TOTAL, the call's seconds, first): the preamble every
# call has run since h200-2026-12-03c -- set -x, the caches, W=/tmp/next, t LABEL (seconds
# since the start, into times.txt), the carried wheels installed, R from ../../h200-2026-12-03c/_ray.sh
# -- and left (the seconds of TOTAL still free, less 10) and finish LABEL... (each run's
# stages.txt, times.log and the whole folder as next.tgz into $OUT).
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/next; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
left() { echo $(( TOTAL - ($(date +%s)-T0) - 10 )); }
finish() {
  for l in "$@"; do cp $W/$l/stages.txt $OUT/stages-$l.txt 2>/dev/null; done
  cp $W/times.txt $OUT/times.log
  tar -czf $OUT/next.tgz --exclude 'next/mps-pipe*' -C /tmp next
}
source scripts/_loadtest.sh
install_wheels
source docs/benchmarks/h200-2026-12-03c/_ray.sh

# Fortieth session (prepared; no device was lent that session): the cold start of eight
# replicas with tuning records and one nvcc build at a time (ttball/kernels/records.py,
# ttball/filelock.py). Eight `serve --ray` replicas of triton-fp16-direct started cold on one
# H200 each built the CUDA kernels' library and tuned every batch size at once, and outlasted
# ~240 s (h200-2026-12-04f/call1 base8; the thirty-eighth session's call 5); primed by one
# process first (86 s) they were ready in 70-79 s. Now one replica builds and tunes each shape
# while the others wait for its record. Runs: `cold` (every cache empty: Triton's, the kernels'
# library, the compile cache), then `warm` (a restart on the caches and records `cold` left),
# each at 320 sessions, eight replicas of one lane (the thirty-ninth session's shape). (The GPU
# tests of the records and the build lock are tests.sh, run with the first call, budget.sh.)
# Then, on the same machine at once, contended.sh: the same replicas tuning all at once as
# before (TTBALL_TUNING_RECORDS=0) against the records again, for frames/s in one call.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=590 bash docs/benchmarks/h200-2026-12-04g/next/records.sh
# > $OUT/call.log 2>&1. Prediction in ../../LOG.md ("Fortieth session").
TOTAL=${TOTAL:-590}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
# caches of this call alone, empty at its start (an earlier call on the machine filled /tmp/tcache)
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
rm -rf /tmp/rtcache /tmp/rttball /tmp/rcache
R cold 270 SESSIONS_8="320" $EIGHT CACHE=/tmp/rcache
after cold
ls -la /tmp/rcache/tuning $TTBALL_CACHE_DIR/kernels > $W/cold/records.txt 2>&1
R warm $(left) SESSIONS_8="320" $EIGHT CACHE=/tmp/rcache
after warm
python3 docs/benchmarks/h200-2026-12-04g/next/ready.py $W/cold/ray/ready-8.json \
  $W/warm/ray/ready-8.json >> $W/times.txt 2>&1
finish cold warm

# Thirty-ninth session, call 3 (after call1/ = ../h200-2026-12-04e/next/busy2.sh and call2/ =
# busy3.sh, which found the worker bound by GPU time). A lane's pushes of ~46 frames complete
# 9-22 windows (binomial: a frame completes its session's window one time in three), so with
# calls of at most 16 a third of the calls are 1-3 windows after a full one, and 6 % of the
# network's rows are padding (call2's again8 metrics). `serve --carry-windows` launches only a
# push's full calls and leaves the rest to the next push. (Run as an opt-in flag, CARRY=1; the
# default since this call's result, so the run without it now says CARRY=0.) First the GPU test of
# the pipeline with it, then the tuning cache primed in one process (ttball bench at the warmed
# sizes: the replicas then start warm), then eight replicas of one lane at 320 sessions with
# it, as they are, and with it again if there is time.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=590 bash docs/benchmarks/h200-2026-12-04f/carry.sh
# > $OUT/call.log 2>&1. Prediction in ../LOG.md ("Thirty-ninth session").
TOTAL=${TOTAL:-590}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
PYTHONPATH=$PWD:/tmp/site timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu -rA \
  tests/kernels/test_prepost.py -k "overlap_on_cuda_gives" > $OUT/tests.log 2>&1
t tests
PYTHONPATH=$PWD:/tmp/site timeout 150 python3 -m ttball.cli bench --device cuda \
  --variants triton-fp16-direct --batch 1,2,4,8,16 --no-profile --no-warm \
  --cache-dir /tmp/scache --out $W/prime > $W/prime.log 2>&1
cp $W/prime/bench.md $OUT/prime.md 2>/dev/null || tail -20 $W/prime.log > $OUT/prime.md
t prime
R carry 200 SESSIONS_8="320" $EIGHT CARRY=1
after carry
R base 170 SESSIONS_8="320" $EIGHT CARRY=0
after base
LEFT=$(left)
[ $LEFT -ge 140 ] && { R carry2 $LEFT SESSIONS_8="320" $EIGHT CARRY=1; after carry2; }
finish  # (the stages tables are in next.tgz: $OUT returns 8 files at most)
rm -f $OUT/times.log

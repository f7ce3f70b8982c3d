# Thirty-sixth session, call 2. Call 1 (../h200-2026-12-04b/next/big.sh, raw in call1/): four
# lanes of up to 192 frames served 5,902 frames/s, eight of ~46 6,351 -- a lane's push grew from
# 49 to 101 ms; its thread ran on the CPU ~23 % of the time while in pushes ~85 %. Where does a
# lane's thread wait? Here: the GPU tests of the new metrics; eight replicas of one lane at 320
# sessions with --backend null (no network; ~9,700 frames/s in the 32nd session), then with
# triton-fp16-direct, each with py-spy --idle on one replica and one of its decode children
# (PYSPY=idle: stacks-8-320.txt, stacks-child-8-320.txt, read by scripts/stack_report.py into
# LABEL/stacks*.txt) and the lane's CPU time by push stage (ttball_push_cpu_seconds; the
# *_cpu_pct columns of serve_push_costs.py, appended to stages.txt) and the allocator's events.
# carry: [".raywhl", ".gpu"]. Run: TOTAL=570 bash docs/benchmarks/h200-2026-12-04c/stacks.sh
# > $OUT/call.log 2>&1. Prediction in ../LOG.md ("Thirty-sixth session").
TOTAL=${TOTAL:-570}
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
PYTHONPATH=$PWD:/tmp/site timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/serve/test_metrics.py tests/kernels/test_prepost.py -k "allocator or stage_timer or overlap" \
  > $OUT/tests.log 2>&1; t tests
EIGHT="REPLICAS=8 LANES=1 GPUS_PER_REPLICA=0.12 CPUS_PER_REPLICA=1.5 DECODE_PROCESSES=2 DECODE_AHEAD=1 BATCHES_AHEAD=1 PYSPY=idle"
after() {  # LABEL: the CPU shares and the stacks beside the quantiles
  python3 scripts/serve_push_costs.py $W/$1/ray >> $W/$1/stages.txt 2>&1
  for f in $W/$1/ray/stacks-*.txt; do
    python3 scripts/stack_report.py $f --procs $W/$1/ray/procs-8-320.json --threads 6 --top 14 \
      > $W/$1/$(basename $f .txt)-report.txt 2>&1
    cp $W/$1/$(basename $f .txt)-report.txt $OUT/$1-$(basename $f .txt)-report.txt
  done
}
R null8 200 SESSIONS_8="320" $EIGHT BACKEND=null; after null8
LEFT=$(left)
[ $LEFT -ge 150 ] && { R triton8 $LEFT SESSIONS_8="320" $EIGHT; after triton8; }
finish null8 triton8

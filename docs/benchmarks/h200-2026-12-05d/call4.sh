#!/usr/bin/env bash
# Prepared in the forty-eighth session (not run yet), for any card, ~9 min: the duplicate test's
# wait after the read-back (GpuPipeline.push, forty-eighth session) against the order before it,
# alternated, in the latency shape of next.sh (four `serve --ray` replicas of two lanes, MPS at
# 50 %, the Triton resize, 48 and 64 sessions). The arm "before" takes dupwait.diff (this
# folder: the change to ttball/kernels/prepost.py) out of the copied tree, "after" puts it back.
# First the rebuilt .raywhl (scripts/make_raywhl.sh, extensions stripped) is unpacked and
# imported: its first use on a device.
# Prediction: in the push the flags' copy (a wait for the side stream's decode tail, resize and
# compare among the MPS clients' kernels) now overlaps the previous push's read-back and
# tracking (postprocess ~0.5 ms a push at 64 sessions on the forty-eighth session's H100); the
# preprocess stage 0.55-0.69 ms a frame -> 0.45-0.6, the push's part the new `dup_wait` column
# of stages-*.txt; the lanes 74 % -> 67-71 % busy at 64, p99 at 64 a few ms lower (55-63 ->
# 52-60), not under 50 by this alone; at 48 level or lower. If dup_wait is near zero and
# preprocess unchanged, the wait was not the flags' (GIL or host work: see the profile in
# call3.sh). Carry [".raywhl", ".gpu"]:
#   TOTAL=570 bash docs/benchmarks/h200-2026-12-05d/call4.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-570}
rm -rf /tmp/next
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
PYTHONPATH=/tmp/site python3 -c "import ray, grpc, pydantic_core, fastapi, uvicorn, yaml, msgpack, aiohttp; print('imports ok', ray.__version__, grpc.__version__)"
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
# the pipeline's GPU tests first (the new order's CUDA path had not run on a GPU), ~1 min
timeout -k 10 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_prepost.py \
  > $OUT/gputests.txt 2>&1; t gputests
DIFF=docs/benchmarks/h200-2026-12-05d/dupwait.diff
F=ttball/kernels/prepost.py  # the new order times its wait as "dup_wait"; the old has none
# order old|new: dupwait.diff taken out of the copied tree, or put back; stops the call if the
# tree is not then in that order
order() {
  local undo="" has=old
  [ "$1" = old ] && undo=-R
  git apply $undo "$DIFF" 2>/dev/null || patch -s $undo -p1 < "$DIFF"
  grep -q dup_wait $F && has=new
  [ "$has" = "$1" ] || { echo "$1 order not applied"; finish $RUNS; exit 1; }
}
SHAPE=(RESIZE=triton MPS_PCT=50 "SESSIONS_4=48 64" CACHE=/tmp/rcache LANES=2)
RUN after 110 "${SHAPE[@]}"
order old; RUN before 110 "${SHAPE[@]}"
order new; RUN after2 110 "${SHAPE[@]}"
order old; RUN before2 110 "${SHAPE[@]}"
order new
finish $RUNS

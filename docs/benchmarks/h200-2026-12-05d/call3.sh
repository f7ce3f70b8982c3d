#!/usr/bin/env bash
# Prepared in the forty-eighth session (not run: no machine was lent after its two calls):
# .raywhl/ rebuilt with its extensions stripped
# (scripts/make_raywhl.sh: site.tar.xz 15.9 -> 13.2 MB, so the working tree, the wheels and the
# clip fit the carry's 64 MiB again) is unpacked, imported, and serves one run of the latency
# shape at 64 sessions (the shape of next.sh as it is), ~4 min, with one lane's pushes 400-429
# profiled with their Python calls (TTBALL_PROFILE_PUSHES, TTBALL_PROFILE_STACK): how much of
# the preprocess stage is _prepare's wait for the duplicate flags (LOG.md, forty-eighth
# session, "the duplicate check without a wait"), and py-spy --gil on one replica (PYSPY=1: the
# SUMMARY's "interpreter lock held %" column, whether the lanes wait for the lock). Carry
# [".raywhl", ".gpu"]:
#   TOTAL=300 bash docs/benchmarks/h200-2026-12-05d/call3.sh > $OUT/call.log 2>&1
TOTAL=${TOTAL:-300}
rm -rf /tmp/next /tmp/site
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
PYTHONPATH=/tmp/site python3 -c "import ray, grpc, pydantic_core, fastapi, uvicorn, yaml, msgpack, aiohttp; print('imports ok', ray.__version__, grpc.__version__)"
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
RUN prof64 80 RESIZE=triton MPS_PCT=50 SESSIONS_4=64 CACHE=/tmp/rcache LANES=2 \
  TTBALL_PROFILE_PUSHES="400:30:$W/prof" TTBALL_PROFILE_STACK=1 PYSPY=1
PYTHONPATH=/tmp/site:. python3 scripts/push_profile_report.py $W/prof/trace.json.gz --python \
  --pushes 30 > $OUT/prof.txt 2>&1
finish $RUNS

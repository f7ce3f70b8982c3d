# Twenty-ninth session, call 3: each lane's decoder in a process of its own (serve
# --decode-processes 1, then named --decode-process; ttball/kernels/decode_process.py), since
# call 2 (diag.sh) found the decoders wait for all of their process's GPU work and not for
# another process's. First the CUDA test of DecoderProcess (CUDA IPC into the parent's slots);
# then serve --ray, four replicas of two lanes as MPS clients, nvJPEG, one decode process a lane
# at 96 / 128 / 160 / 192 sessions, against call 1's in-process nvJPEG at 128 (5,492 frames/s);
# the same without it at 128 here if time is left. Prediction (LOG.md): 7,000 +- 1,000 frames/s.
# carry: [".raywhl", ".gpu"]. Run: bash docs/benchmarks/h200-2026-12-03e/process.sh > $OUT/process.log 2>&1
set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
W=/tmp/proc; mkdir -p $W
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $W/times.txt; }
TOTAL=${TOTAL:-370}
source scripts/_loadtest.sh
install_wheels
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_process.py > $W/pytest.txt 2>&1; t pytest
source docs/benchmarks/h200-2026-12-03c/_ray.sh
SESSIONS_4="96 128 160 192" R process 300 DECODE_PROCESSES=1  # ran (df21a83) as DECODE_PROCESS=1, --decode-process
LEFT=$(( TOTAL - ($(date +%s)-T0) - 10 ))
[ $LEFT -ge 100 ] && SESSIONS_4="128" R inproc $LEFT
cp $W/times.txt $W/pytest.txt $OUT/
tar -czf $OUT/proc.tgz -C /tmp proc

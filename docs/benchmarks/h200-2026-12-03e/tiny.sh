# Twenty-ninth session, call 4 (the ~140 s of device time left): DecoderProcess outside the
# worker. One process, time slices, batches of 40 real frames (a lane's push at 7,140 frames/s):
# nvJPEG in the process itself, through one decode process and through two, with 20 ms of
# matmuls queued ahead on another stream of the process before each call, then alone; each row
# with the children's split (decode / copies into the slot / the rest). Then the CUDA test of
# DecoderProcess (two children). carry: [".raywhl", ".gpu"].
# Run: bash docs/benchmarks/h200-2026-12-03e/tiny.sh  (writes into $OUT)
export PYTHONUNBUFFERED=1
source scripts/_loadtest.sh
install_wheels
G() { timeout 60 python3 scripts/gpu_jpeg_procs.py --video .gpu/real_rally_a.mp4 --batch 40 \
  --seconds 2 --procs 1 --library nvjpeg --out $OUT/$1.json "${@:2}" >> $OUT/rows.log 2>&1; }
G ahead --ahead-ms 20 --decode-processes 0,1,2
G alone --decode-processes 1,2
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_process.py -k cuda > $OUT/pytest.txt 2>&1
grep -h '"procs"' $OUT/rows.log > $OUT/rows.jsonl

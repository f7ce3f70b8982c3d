set -x
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1
T0=$(date +%s); t() { echo "$1 $(( $(date +%s)-T0 ))s" >> $OUT/times.txt; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1; t pip
nvidia-smi > $OUT/smi.txt 2>&1
PYTHONPATH=$PWD:/tmp/site timeout 120 python3 -m pytest -q -m gpu tests/serve/test_device_pipeline.py > $OUT/tests.log 2>&1; t tests-lanes
(cd .ab && PYTHONPATH=$PWD timeout 120 python3 -m pytest -q -m gpu tests/kernels/test_conv_variants.py > $OUT/tests-ab.log 2>&1); t tests-ab
export PYTHONPATH=$PWD:/tmp/site
timeout 140 python3 scripts/gpu_e2e_procs.py --compile-resize --seconds 6 --out $OUT/procs.json --rows 4x16x2 --start-timeout-s 100 --budget-s 130 > /tmp/procs.log 2>&1; t procs
timeout 130 python3 scripts/gpu_e2e_procs.py --compile-resize --seconds 6 --decoder nvimgcodec-hw --out $OUT/procs-hw.json --rows 4x16x2 --start-timeout-s 100 --budget-s 120 > /tmp/procs-hw.log 2>&1; t procs-hw
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d; t mps-up
R=$(( 570 - ($(date +%s)-T0) ))
timeout $R python3 scripts/gpu_e2e_procs.py --compile-resize --seconds 6 --tag mps --out $OUT/procs-mps.json --rows 4x16x2 --start-timeout-s 100 --budget-s $((R-10)) > /tmp/procs-mps.log 2>&1; t procs-mps
echo quit | nvidia-cuda-mps-control
tar -czf $OUT/logs.tgz -C /tmp procs.log procs-hw.log procs-mps.log pip.log mps-log 2>/dev/null
ls -la $OUT

# Twenty-sixth session, call 5: does a client's own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE cap it,
# and does CUDA report the cap (what `serve --ray --mps-sm-percent` and /readyz rely on)?
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
P='import torch; p=torch.cuda.get_device_properties(0); print(p.multi_processor_count)'
echo "no MPS: $(python3 -c "$P")" | tee $OUT/sm.txt
nvidia-cuda-mps-control -d
for pct in "" 50 25; do
  echo "MPS pct=${pct:-none}: $(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct python3 -c "$P" 2>&1 | tail -1)"
done | tee -a $OUT/sm.txt
echo quit | nvidia-cuda-mps-control

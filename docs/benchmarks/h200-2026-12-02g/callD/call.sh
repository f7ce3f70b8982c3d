BUDGET_S=560 OUT=$OUT/b timeout 590 bash scripts/gpu_bench.sh nocg_fp32_23

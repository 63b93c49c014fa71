#!/usr/bin/env bash
# On the device, with the probe carry (MOE_PROBE_SKIP_STORE): the plain (unstaged) epilogue's cost, from the GEMM
# kernels' time with the epilogue's stores skipped (the values are still computed), under ncu.
set -uo pipefail
export CARRY=${CARRY:-.device-carry-exp}
source scripts/device/carry_env.sh
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
for point in deepseek-v3:8192 qwen3-30b-a3b:8192 mixtral-8x7b:1024 qwen3-30b-a3b:2048; do
  for v in 0 1; do
    echo "== $point skip_store=$v"
    MOE_PROBE_SKIP_STORE=$v timeout 150 $ncu --clock-control none -k regex:grouped_gemm -c 2 --metrics "$metrics" $bin/moe bench --backend cuda \
      --shape ${point%%:*} --tokens ${point#*:} --repeats 3 2>&1 | grep -E "wgmma_grouped|gpu__|sm__" | sed -E 's/\(.*//; s/ +/ /g' | cut -c1-100
  done
done

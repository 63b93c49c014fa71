#!/usr/bin/env bash
# On the device: the same ncu metrics as wgmma_load_probe.sh on cuBLAS's batched GEMMs (bmm_peer.py) at
# DeepSeek-V3 and Qwen3 T=8192, plus each kernel's launch shape, to compare with our wgmma GEMMs.
set -uo pipefail
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__cluster_dim_x,launch__cluster_dim_y
for point in deepseek-v3:8192 qwen3-30b-a3b:8192; do
  echo "== $point"
  # the gate/up GEMM, then the down GEMM, each run once
  timeout 250 $ncu --clock-control none -k "regex:nvjet|gemm|cutlass|xmma" -c 2 --metrics "$metrics" python3 scripts/device/bmm_peer.py $point --once 2>&1 |
    grep -E "^  [a-zA-Z_].*\(|gpu__|sm__|lts__|dram__|launch__|tflops|bmm" | sed -E 's/\(.*//; s/ +/ /g' | cut -c1-110 > $OUT/ncu_bmm_${point%%:*}.txt
  cat $OUT/ncu_bmm_${point%%:*}.txt | tail -48
done

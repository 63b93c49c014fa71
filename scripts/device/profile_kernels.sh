#!/usr/bin/env bash
# On the device: per-kernel durations of one decode forward (Qwen3-30B-A3B, T=1) and the tensor-pipe use of
# the prefill GEMMs (DeepSeek-V3, T=8192), with Nsight Compute (clocks left alone, as METHOD.md says).
set -uo pipefail
source scripts/device/carry_env.sh
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
kernels='regex:router|permute|grouped_gemm|unpermute|count_kernel|layout|scatter|tiles|DeviceRadix|bf16_to_f32'
"$ncu" --clock-control none -k "$kernels" -c 12 --metrics gpu__time_duration.sum \
  $bin/moe bench --backend cuda --shape qwen3-30b-a3b --tokens 1 --repeats 3 > "$OUT/decode.txt" 2>&1
grep -E "^  [a-z_]|gpu__time_duration" "$OUT/decode.txt" | sed 's/(int, int, .*)//' | head -40
"$ncu" --clock-control none -k regex:grouped_gemm -c 2 \
  --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
  $bin/moe bench --backend cuda --shape deepseek-v3 --tokens 8192 --repeats 3 > "$OUT/prefill.txt" 2>&1
grep -E "grouped_gemm|\s(gpu__|sm__|dram__|l1tex__|smsp__|launch__)" "$OUT/prefill.txt" | sed 's/(.*)//' | head -40

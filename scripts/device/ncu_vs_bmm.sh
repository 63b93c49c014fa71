#!/usr/bin/env bash
# On the device: the layer's two expert GEMMs (our wgmma kernels, one forward of `moe bench`, balanced routing)
# and cuBLAS's batched GEMMs on the same shapes at exactly balanced routing (bmm_peer.py --once) under the
# same ncu metrics: time, SM clock, tensor-pipe share of the active cycles, L2 and DRAM throughput, the SMs'
# L2 sectors, DRAM bytes read, and each kernel's launch shape. Needs .device-carry/ (prepare_carry.sh).
# Usage: [POINTS="shape:T ..."] bash scripts/device/ncu_vs_bmm.sh (raw logs in $OUT/ncu_vs_bmm_*.txt).
set -uo pipefail
source scripts/device/carry_env.sh
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__cluster_dim_x
# ncu's per-kernel sections, one line per metric, kernel names cut at their parameter lists.
compact() { grep -E "^  [a-zA-Z_].*\(|gpu__|sm__|lts__|dram__|launch__" | sed -E 's/\(.*//; s/ +/ /g' | cut -c1-110; }
for point in ${POINTS:-deepseek-v3:4096}; do
  shape=${point%%:*} T=${point#*:}
  echo "== $point: ours (gate/up, then down)"
  timeout 280 "$ncu" --clock-control none -k "regex:grouped_gemm" -c 2 --metrics "$metrics" \
    "$bin/moe" bench --backend cuda --shape "$shape" --tokens "$T" --repeats 3 > "$out/ncu_vs_bmm_${shape}_${T}_moe.log" 2>&1
  compact < "$out/ncu_vs_bmm_${shape}_${T}_moe.log" | tee "$out/ncu_vs_bmm_${shape}_${T}_moe.txt"
  [ -s "$out/ncu_vs_bmm_${shape}_${T}_moe.txt" ] || tail -5 "$out/ncu_vs_bmm_${shape}_${T}_moe.log"
  echo "== $point: cuBLAS bmm (gate/up, then down)"
  timeout 280 "$ncu" --clock-control none -k "regex:nvjet|gemm|cutlass|xmma" -c 2 --metrics "$metrics" \
    python3 scripts/device/bmm_peer.py "$point" --once 2>&1 | compact | tee "$out/ncu_vs_bmm_${shape}_${T}_bmm.txt"
done

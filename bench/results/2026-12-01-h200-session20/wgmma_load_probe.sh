#!/usr/bin/env bash
# On the device, with a carry built from wgmma_load_probe.patch (CARRY=.device-carry-exp): the wgmma GEMMs
# under ncu with MOE_PROBE_LOADS = 0 (full loads), 1 (half of each A tile), 2 (half of each B tile), 3 (no loads:
# the wgmmas read stale stages). Results are wrong in 1-3; only the kernels' times and rates matter.
set -uo pipefail
export CARRY=${CARRY:-.device-carry-exp}
source scripts/device/carry_env.sh
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex.sum
for point in ${POINTS:-deepseek-v3:8192 qwen3-30b-a3b:8192 qwen3-30b-a3b:2048}; do
  for mode in ${MODES:-0 1 2 3}; do
    echo "== $point mode $mode"
    MOE_PROBE_LOADS=$mode timeout 200 $ncu --clock-control none -k regex:grouped_gemm -c 2 --metrics "$metrics" \
      $bin/moe bench --backend cuda --shape ${point%%:*} --tokens ${point#*:} --repeats 3 > $out/ncu_${point%%:*}_${point#*:}_$mode.txt 2>&1
    grep -E "wgmma_grouped|gpu__|sm__|lts__|dram__" $out/ncu_${point%%:*}_${point#*:}_$mode.txt | sed -E 's/\(.*//; s/ +/ /g' | cut -c1-100
  done
done

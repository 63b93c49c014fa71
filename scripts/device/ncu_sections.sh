#!/usr/bin/env bash
# On the device: Nsight Compute's speed-of-light and memory-workload sections for the grouped-GEMM kernels
# of one forward, per point, to compare how kernels use DRAM and L2 (e.g. the one-block-an-SM wgmma weight
# stream against the mma.sync kernels'). Full reports in $OUT/ncu_sections.tgz; the key lines printed.
# Usage: POINTS="shape:T[:VAR=v;VAR=v] ..." [KERNELS=ncu -k filter] [COUNT=kernels per point, 2] bash scripts/device/ncu_sections.sh
set -uo pipefail
source scripts/device/carry_env.sh
work=/tmp/ncu_sections && rm -rf "$work" && mkdir -p "$work"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
i=0
for point in ${POINTS:?}; do
  IFS=: read -r shape T settings <<< "$point"
  i=$((i + 1))
  env ${settings//;/ } timeout 300 "$ncu" --clock-control none -k "${KERNELS:-regex:grouped_gemm}" -c "${COUNT:-2}" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section LaunchStats --section Occupancy "$bin/moe" bench --backend cuda --shape "$shape" --tokens "$T" \
    --repeats 3 > "$work/$i.txt" 2>&1
  echo "== $shape T=$T ${settings:-default} (rc $?)"
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|L1/TEX Hit|Mem Busy|Max Bandwidth|L2 Cache Throughput|SM Frequency|DRAM Frequency|Block Size|Registers Per|Theoretical Occupancy|Achieved Occupancy|Waves Per SM|Grid Size|Shared Memory Configuration Size" \
    "$work/$i.txt" | sed -E 's/\(.*\)//; s/ +/ /g' | head -60
done
tar czf "${OUT:-/tmp}/ncu_sections.tgz" -C "$work" .

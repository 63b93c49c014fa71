#!/usr/bin/env bash
# On the device: where the L2 traffic of the grouped-GEMM kernels comes from (ncu, one forward per point): L2 sectors
# by source unit (tex: the SMs; ltcfabric: the other L2 partition; gcc), reads and writes, DRAM bytes.
# Usage: [POINTS="shape:T ..."] bash scripts/device/ncu_l2_sources.sh
source scripts/device/carry_env.sh
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
$ncu --query-metrics 2>/dev/null | grep -oE "^lts__t_(sectors|requests)_srcunit_[a-z]+" | grep -v "_l$" | sort -u > /tmp/units.txt
cat /tmp/units.txt | tr '\n' ' '; echo
metrics=$(sed 's/$/.sum/' /tmp/units.txt | tr '\n' ',')lts__t_sectors.sum,dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum
for point in ${POINTS:-qwen3-30b-a3b:2048 deepseek-v3:8192}; do
  echo "== $point"
  timeout 250 $ncu --clock-control none -k regex:grouped_gemm -c 2 --metrics "$metrics" $bin/moe bench --backend cuda \
    --shape ${point%%:*} --tokens ${point#*:} --repeats 3 2>&1 | grep -E "wgmma_grouped|lts__|dram__|gpu__time" | sed -E 's/ +/ /g' | cut -c1-120
done

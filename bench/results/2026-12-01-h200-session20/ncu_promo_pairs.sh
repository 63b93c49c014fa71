#!/usr/bin/env bash
# On the device, with the probe carry (wgmma_load_probe.patch + MOE_PROBE_PROMO): the wgmma GEMMs' L2->SM sectors,
# time, clock and tensor-pipe use at DeepSeek-V3 T=8192 for the TMA maps' L2 promotion (none, 128 B, 256 B = main)
# and with pairs off.
set -uo pipefail
export CARRY=${CARRY:-.device-carry-exp}
source scripts/device/carry_env.sh
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,dram__bytes_read.sum
for v in "MOE_PROBE_PROMO=256" "MOE_PROBE_PROMO=128" "MOE_PROBE_PROMO=0" "MOE_WGMMA_PAIRS=off"; do
  echo "== ${SHAPE:-deepseek-v3} ${T:-8192} $v"
  env $v timeout 200 $ncu --clock-control none -k regex:grouped_gemm -c 2 --metrics "$metrics" $bin/moe bench --backend cuda \
    --shape ${SHAPE:-deepseek-v3} --tokens ${T:-8192} --repeats 3 2>&1 | grep -E "wgmma_grouped|gpu__|sm__|lts__|dram__" | sed -E 's/\(.*//; s/ +/ /g' | cut -c1-100
done

set -uo pipefail
source scripts/device/carry_env.sh
cuobjdump -res-usage $bin/cuda_tests 2>/dev/null | grep -A1 wgmma_grouped_gemm_kernel | grep -oE "REG:[0-9]+|STACK:[0-9]+|LOCAL:[0-9]+" | sort | uniq -c
TESTS='*' MODEL_TESTS=1 POINTS="qwen3-30b-a3b:512,1024,2048,8192:2 qwen3-30b-a3b:512,1024,2048,8192:2:MOE_WGMMA_SECTOR_STORES=off mixtral-8x7b:1024,2048,8192:2 mixtral-8x7b:1024,2048,8192:2:MOE_WGMMA_SECTOR_STORES=off deepseek-v3:1024,8192:2 deepseek-v3:1024,8192:2:MOE_WGMMA_SECTOR_STORES=off" bash scripts/device/midt_bench.sh 2>&1 | grep -v ceilings
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sectors_srcunit_tex_op_write.sum
for v in on off; do
  echo "== ncu deepseek-v3 8192 sector stores $v"
  MOE_WGMMA_SECTOR_STORES=$v timeout 150 $ncu --clock-control none -k regex:grouped_gemm -c 2 --metrics "$metrics" $bin/moe bench --backend cuda \
    --shape deepseek-v3 --tokens 8192 --repeats 3 2>&1 | grep -E "wgmma_grouped|gpu__|sm__|lts__" | sed -E 's/\(.*//; s/ +/ /g' | cut -c1-100
done

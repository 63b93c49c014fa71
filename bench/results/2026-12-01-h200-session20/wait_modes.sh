#!/usr/bin/env bash
# On the device, with the probe carry: the wgmma consumers' stage release, MOE_PROBE_WAIT = 0 (main: keep one k-block
# of wgmmas in flight, free the previous stage after the next is issued), 1 (wait for all and free the stage at once,
# as cuBLAS's kernels do), 2 (main's, but free the previous stage before blocking on a stage that has not landed).
# The wgmma tests under each mode, the layer alternated by mode, and ncu on DeepSeek-V3 T=8192's GEMMs.
set -uo pipefail
export CARRY=${CARRY:-.device-carry-exp}
source scripts/device/carry_env.sh
for m in 1; do
  MOE_PROBE_WAIT=$m $bin/cuda_tests --gtest_filter='*Wgmma*:*CudaMoeLayer*' > $out/tests_wait$m.log 2>&1
  echo "tests wait=$m: $(grep -E '^\[  (PASSED|FAILED)' $out/tests_wait$m.log | tr '\n' ' ')"
done
for point in ${POINTS:-deepseek-v3:8192 qwen3-30b-a3b:8192 qwen3-30b-a3b:2048 mixtral-8x7b:1024 deepseek-v3:1024 mixtral-8x7b:8192}; do
  for round in 1 2; do
    for m in 0 1; do
      t=$(MOE_PROBE_WAIT=$m $bin/moe bench --backend cuda --shape ${point%%:*} --tokens ${point#*:} --repeats 10 2>&1 | awk '$4=="cuda"{print $5, $9}')
      echo "$point round $round wait=$m: $t"
    done
  done
done | tee $out/layer.txt
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
for m in 0 1; do
  echo "== ncu deepseek-v3 8192 wait=$m"
  MOE_PROBE_WAIT=$m timeout 150 $ncu --clock-control none -k regex:grouped_gemm -c 2 --metrics "$metrics" $bin/moe bench --backend cuda \
    --shape deepseek-v3 --tokens 8192 --repeats 3 2>&1 | grep -E "wgmma_grouped|gpu__|sm__" | sed -E 's/\(.*//; s/ +/ /g' | cut -c1-100
done

#!/usr/bin/env bash
# On the device, one call per iteration of the wgmma grouped GEMM (issue 5): the GPU tests under the
# default kernel policy, then again with every batch of 64+ rows per expert forced through wgmma
# (MOE_GROUPED_GEMM=wgmma, so the layer tests cover it too), then `moe bench --backend cuda` on the
# prefill shapes with the mma.sync kernels and with wgmma, in the same run. Logs and JSON to $OUT.
# Needs a carry folder from scripts/device/prepare_carry.sh: CARRY names it (default .device-carry).
# Usage: wgmma_bench.sh [shapes] [tokens]
set -uo pipefail
source scripts/device/carry_env.sh
json=/tmp/wgmma-json && rm -rf "$json" && mkdir -p "$json"  # packed into one file: the device returns 8
shapes=${1:-deepseek-v3,mixtral-8x7b,qwen3-30b-a3b}
tokens=${2:-1024,8192}
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
summary() { grep -E '^\[  (PASSED|FAILED)|^\[  FAILED' "$1" | tr '\n' ' '; }
# The kernel's own test first: a hang or a wrong result stops the run before it costs more device time.
timeout 60 "$bin/cuda_tests" --gtest_filter='CudaWgmma*' > "$out/tests_kernel.log" 2>&1
rc=$?
echo "wgmma kernel tests: rc $rc $(summary "$out/tests_kernel.log")"
if [ $rc -ne 0 ]; then grep -E "Failure|Expected|Which is|seed|error|row" "$out/tests_kernel.log" | head -20; exit 1; fi
timeout 240 "$bin/cuda_tests" > "$out/tests_policy.log" 2>&1
echo "cuda_tests (policy): rc $? $(summary "$out/tests_policy.log")"
MOE_GROUPED_GEMM=wgmma timeout 120 "$bin/cuda_tests" --gtest_filter='CudaMoeLayer*:CudaGroupedGemm*' \
  > "$out/tests_wgmma.log" 2>&1
echo "cuda_tests layer + GEMM (MOE_GROUPED_GEMM=wgmma): rc $? $(summary "$out/tests_wgmma.log")"
grep -hE "Failure|Expected|Which is|seed|error" "$out"/tests_p*.log "$out"/tests_w*.log | head -20
for shape in ${shapes//,/ }; do
  for kernel in mma wgmma; do
    MOE_GROUPED_GEMM=$kernel timeout 100 "$bin/moe" bench --backend cuda --shape "$shape" --tokens "$tokens" \
      --repeats 20 --json "$json/${shape}_${kernel}.json" > "$out/bench.tmp" 2>&1
    rc=$?
    cat "$out/bench.tmp" >> "$out/bench.log"
    echo "== $shape $kernel (rc $rc)"
    grep -E "^$shape|ceilings|rror" "$out/bench.tmp"
  done
done
rm -f "$out/bench.tmp"
tar czf "$out/bench_json.tgz" -C "$json" .

#!/usr/bin/env bash
# The GPU tests: cuda_tests (ops, layer) and causal_lm_cuda_tests (every model fixture), moe info and demo.
# GTEST_FILTER in the environment narrows both binaries (gtest reads it). Logs in $OUT; exit 1 if a test fails.
set -uo pipefail
source scripts/device/lib/common.sh
gpu
"$bin/moe" info
status=0
for t in cuda_tests causal_lm_cuda_tests; do
  "$bin/$t" > "$out/$t.log" 2>&1 || status=1
  grep -E '^\[  FAILED  \]|Failure|Expected|Which is|seed' "$out/$t.log" | head -40
  row "$t" "$(gtest_counts "$out/$t.log")"
done
"$bin/moe" demo --backend cuda > "$out/demo_cuda.log" 2>&1
rc=$?
[ $rc = 0 ] || status=1
row "moe demo --backend cuda" "exit $rc" "$(grep -m1 '^check' "$out/demo_cuda.log")"
exit $status

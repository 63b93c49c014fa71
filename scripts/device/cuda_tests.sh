#!/usr/bin/env bash
# On the device: the GPU tests (label cuda) from the carried build, then `moe info`. Full log in $OUT.
set -uo pipefail
source scripts/device/carry_env.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader
$bin/moe info
$bin/cuda_tests 2>&1 | tee "$out/cuda_tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED)|Failure|error|Expected|Which is|seed" | head -60

#!/usr/bin/env bash
# On the device: the model runner's GPU test (causal_lm_cuda_tests: every fixture with the MoE blocks on the
# GPU, and the CUDA layer's intermediate-size padding) from the carried build-model-cuda/carry/ that
# scripts/device/prepare_model_carry.sh makes here. Full log in $OUT.
set -uo pipefail
CARRY=${CARRY:-build-model-cuda/carry}
source scripts/device/carry_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$carry/bin/causal_lm_cuda_tests 2>&1 | tee "$out/causal_lm_cuda_tests.log" |
  grep -E "^\[ +(FAILED|PASSED|SKIPPED) |cuda \]|Failure|Expected|Which is|error|differs|greedy" | head -80

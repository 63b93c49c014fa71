#!/usr/bin/env bash
# On the device, one call that checks a session's GPU work end to end from the carry of
# scripts/device/prepare_nccl_carry.sh (which holds every GPU binary): on a multi-GPU kind the expert-parallel
# run of nccl_ep.sh (tests, layer CLI, dispatch bench, `moe generate` across the GPUs), then on GPU 0
# gpu_regression.sh (every single-GPU test and the bench points), the fused decode kernel's phase stamps
# (CudaDecode.DISABLED_PhaseTimes*), and compute_sanitizer.sh (LIMIT seconds a tool, default 150). Each part
# logs into its own folder, packed into $OUT/session_check.tgz (the device returns 8 files); the compact
# output of every part goes to stdout and $OUT/session_check.txt.
set -uo pipefail
export NCCL_CARRY=${NCCL_CARRY:-.device-carry-nccl}
source scripts/device/mpi_env.sh
final_out=${OUT:-/tmp}
work=/tmp/session-check && rm -rf "$work" && mkdir -p "$work"
n_gpus=$(nvidia-smi -L | wc -l)
failed="$work/failed" && : > "$failed"  # the parts that failed (the block below runs in a subshell)
{
  if [ "$n_gpus" -ge 2 ]; then
    mkdir -p "$work/ep"
    OUT="$work/ep" bash scripts/device/nccl_ep.sh 2>&1 | grep -vE "PMIx|compression|^$|----|suppress|pcompress|strongly|continue|startup times"
    [ "${PIPESTATUS[0]}" = 0 ] || echo nccl_ep >> "$failed"
  else
    echo "== one GPU: the expert-parallel part needs a multi-GPU kind (skipped)"
  fi
  mkdir -p "$work/regression" "$work/sanitizer"
  echo "== gpu_regression.sh"
  CARRY=$NCCL_CARRY OUT="$work/regression" bash scripts/device/gpu_regression.sh || echo gpu_regression >> "$failed"
  echo "== decode phase stamps"
  CARRY=$NCCL_CARRY bash -c 'source scripts/device/carry_env.sh; timeout 120 "$bin/cuda_tests" \
    --gtest_also_run_disabled_tests --gtest_filter="CudaDecode.DISABLED_*"' 2>&1 | grep -E " T [0-9]|FAIL"
  echo "== compute_sanitizer.sh"
  CARRY=$NCCL_CARRY OUT="$work/sanitizer" LIMIT=${LIMIT:-150} bash scripts/device/compute_sanitizer.sh || echo compute_sanitizer >> "$failed"
} 2>&1 | tee "$work/session_check.txt"
cp "$work/session_check.txt" "$final_out/"
tar czf "$final_out/session_check.tgz" -C "$work" .
[ -s "$failed" ] && { echo "failed: $(tr '\n' ' ' < "$failed")"; exit 1; }
exit 0

#!/usr/bin/env bash
# Everything in one call, from the carry of `run.sh prepare_nccl` (which holds every GPU binary).
# On a multi-GPU kind the expert-parallel run of `ep` (tests, layer CLI, dispatch bench, `moe generate` across
# the GPUs), then on GPU 0 `regression` (every single-GPU test and the bench points), the fused decode
# kernel's phase stamps (CudaDecode.DISABLED_PhaseTimes*), and `sanitizer` (LIMIT seconds a tool, default
# 150). Each part logs into its own folder, packed into $OUT/check.tgz (the device returns 8 files); the
# parts' summaries are joined in this one. Exit 1 if a part failed.
set -uo pipefail
export NCCL_CARRY=${NCCL_CARRY:-.device-carry-nccl}
source scripts/device/lib/mpi.sh
source scripts/device/lib/common.sh
final_out=$out
work=/tmp/moe-check && rm -rf "$work" && mkdir -p "$work"
n_gpus=$(nvidia-smi -L | wc -l)
failed=""
if [ "$n_gpus" -ge 2 ]; then
  mkdir -p "$work/ep"
  note "== ep"
  OUT="$work/ep" bash scripts/device/recipes/ep.sh 2>&1 |
    grep -vE "PMIx|compression|^$|----|suppress|pcompress|strongly|continue|startup times"
  [ "${PIPESTATUS[0]}" = 0 ] || failed="$failed ep"
else
  note "== ep: skipped (one GPU; the expert-parallel part needs a multi-GPU kind)"
fi
mkdir -p "$work/regression" "$work/sanitizer"
note "== regression"
CARRY=$NCCL_CARRY OUT="$work/regression" bash scripts/device/recipes/regression.sh || failed="$failed regression"
echo "== decode phase stamps"
CARRY=$NCCL_CARRY bash -c 'source scripts/device/lib/common.sh; timeout 120 "$bin/cuda_tests" \
  --gtest_also_run_disabled_tests --gtest_filter="CudaDecode.DISABLED_*"' 2>&1 | grep -E " T [0-9]|FAIL"
note "== sanitizer"
CARRY=$NCCL_CARRY OUT="$work/sanitizer" LIMIT=${LIMIT:-150} bash scripts/device/recipes/sanitizer.sh || failed="$failed sanitizer"
tar czf "$final_out/check.tgz" -C "$work" .
[ -n "$failed" ] && { row failed "$failed"; exit 1; }
exit 0

#!/usr/bin/env bash
# Expert parallelism over NCCL on a multi-GPU kind (nvidia-h200-x2), one process per GPU: tests, CLI, bench.
# From the carry of `run.sh prepare_nccl`: checks the carry (ldd, mpirun, topology), runs the GPU EP tests,
# the `moe layer --ep --backend cuda` check against `moe layer --backend cuda`, the dispatch bench, and
# `moe generate --ep --backend cuda` on the fixtures against one GPU (generate_ep); prints compact tables.
# NP overrides the rank count (default: the GPUs visible). Logs and JSON in $OUT. Exit 1 if any part failed.
set -uo pipefail
source scripts/device/lib/mpi.sh
CARRY=${CARRY:-${NCCL_CARRY:-.device-carry-nccl}}
source scripts/device/lib/common.sh
out=${OUT:-/tmp}
B=${NCCL_CARRY:-.device-carry-nccl}/bin
NP=${NP:-$(nvidia-smi -L | wc -l)}
status=0
echo "== carry"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m 2>&1 | head -6
$MPIRUN --version 2>&1 | head -1
ldd $B/moe | grep -E "not found|nccl|mpi\.|fmt|cublas\.so" | sed 's/ (0x.*//'
$MPIRUN -np "$NP" hostname | sort | uniq -c

echo "== tests: ep_cuda_ep_tests at $NP GPUs"
$MPIRUN -np "$NP" $B/ep_cuda_ep_tests > "$out/ep_tests.log" 2>&1
rc=$?
echo "exit $rc"
[ $rc = 0 ] || status=1
row "ep_cuda_ep_tests at $NP GPUs" "exit $rc" "$(gtest_counts "$out/ep_tests.log")"
sed "s/\x1b\[[0-9;]*m//g" "$out/ep_tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|error|  .* T +[0-9]+: max rel" |
  sed 's/\x1b\[[0-9;]*m//g' | head -70

echo "== moe layer --ep --backend cuda vs moe layer --backend cuda (qwen3_moe, T 300, H 256, E 64, k 6)"
case=/tmp/epcase && mkdir -p $case && python3 scripts/device/ep_cli_case.py make $case
args="--config $case/config.json --weights $case/weights.safetensors --input $case/input.safetensors"
$B/moe layer $args --backend cuda --output $case/one.safetensors
# TRANSFER/COMBINE wires; the f32 combine is held to the bf16 tolerance too: the single-GPU layer runs
# wgmma tiles at this size, the EP layer mma.sync ones, whose bf16 outputs may round apart.
for wire in bf16/bf16 fp8/bf16 bf16/f32; do
  tag=${wire/\//-}
  $MPIRUN -np "$NP" $B/moe layer $args --backend cuda --ep --ep-transfer ${wire%/*} --ep-combine ${wire#*/} \
    --output $case/ep_$tag.safetensors --stats $case/ep_layer_stats_$tag.json
  tol=$([ ${wire%/*} = bf16 ] && echo 0.01 || echo 0.125)
  verdict=$(python3 scripts/device/ep_cli_case.py compare $case/ep_$tag.safetensors $case/one.safetensors $tol) || status=1
  echo "$wire: $verdict"
  row "moe layer --ep $wire vs one GPU" "$verdict"
done

echo "== moe bench --dispatch --backend cuda at $NP GPUs (H 7168, k 8, E 256)"
$MPIRUN -np "$NP" $B/moe bench --dispatch --backend cuda --tokens 128,4096 --wire bf16,fp8 --repeats 30 \
  --json "$out/dispatch_cuda_np$NP.json" 2>&1 | tee "$out/bench_np$NP.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
python3 - "$out/dispatch_cuda_np$NP.json" >> "$SUMMARY" <<'PY'
import json, sys
print("tokens/rank\twire\tdispatch us\tx NCCL a2a\tcombine us\tx NCCL a2a")
for r in json.load(open(sys.argv[1])):
    print(f'{r["tokens_per_rank"]}\t{r["wire"]}\t{r["dispatch_us"]:.0f}\t{r["dispatch_ratio_to_peer"]:.2f}\t{r["combine_us"]:.0f}\t{r["combine_ratio_to_peer"]:.2f}')
PY

tar czf "$out/ep_layer_stats.tgz" -C $case $(cd $case && ls ep_layer_stats_*.json)
NP=$NP bash scripts/device/recipes/generate_ep.sh || status=1
exit $status

#!/usr/bin/env bash
# On a multi-GPU device kind (nvidia-h200-x2): expert parallelism over NCCL, one process per GPU, from the
# carry made by scripts/device/prepare_nccl_carry.sh. Checks the carry (ldd, mpirun, topology), runs the GPU
# EP tests, the `moe layer --ep --backend cuda` check against `moe layer --backend cuda`, the dispatch
# bench, and `moe generate --ep --backend cuda` on the fixtures against one GPU (nccl_generate.sh); prints
# compact tables. Logs and JSON in $OUT. Exits 1 if any part failed.
set -uo pipefail
source scripts/device/mpi_env.sh
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
    --output $case/ep_$tag.safetensors --stats $out/ep_layer_stats_$tag.json
  tol=$([ ${wire%/*} = bf16 ] && echo 0.01 || echo 0.125)
  echo -n "$wire: " &&
    python3 scripts/device/ep_cli_case.py compare $case/ep_$tag.safetensors $case/one.safetensors $tol || status=1
done

echo "== moe bench --dispatch --backend cuda at $NP GPUs (H 7168, k 8, E 256)"
$MPIRUN -np "$NP" $B/moe bench --dispatch --backend cuda --tokens 128,4096 --wire bf16,fp8 --repeats 30 \
  --json "$out/dispatch_cuda_np$NP.json" 2>&1 | tee "$out/bench_np$NP.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1

NP=$NP bash scripts/device/nccl_generate.sh || status=1
exit $status

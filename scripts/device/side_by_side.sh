#!/usr/bin/env bash
# On the device, one call: GPU tests, `moe bench --backend cuda` on the issue's shapes and token counts
# (balanced and Zipf routing), and the PyTorch peers on the same shapes; one table at the end.
# Needs .device-carry/ (scripts/device/prepare_carry.sh). Usage: side_by_side.sh [shapes] [tokens]
set -uo pipefail
source scripts/device/carry_env.sh  # the carried build (scripts/device/prepare_carry.sh)
# Everything goes to a work folder; $OUT gets the table, the logs and one tarball (the device returns 8 files).
out=/tmp/moe-side-by-side
rm -rf "$out" && mkdir -p "$out"
shapes=${1:-qwen3-30b-a3b,deepseek-v3,mixtral-8x7b,olmoe-1b-7b}
tokens=${2:-1,16,128,1024,8192}
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee "$out/gpu.txt"
$bin/cuda_tests > "$out/cuda_tests.log" 2>&1; echo "cuda_tests: $(grep -E '^\[  (PASSED|FAILED)' "$out/cuda_tests.log" | tr '\n' ' ')"
$bin/moe demo --backend cuda > "$out/demo_cuda.log" 2>&1; echo "demo --backend cuda: exit $?, $(grep '^check' "$out/demo_cuda.log")"
for routing in balanced zipf; do
  for shape in ${shapes//,/ }; do
    $bin/moe bench --backend cuda --shape "$shape" --tokens "$tokens" --routing "$routing" --repeats 30 \
      --json "$out/moe_${shape}_${routing}.json" >> "$out/moe_bench.log" 2>&1 || echo "moe bench failed: $shape $routing"
  done
  PYTHONUNBUFFERED=1 python3 scripts/device/torch_moe_peers.py "$shapes" "$tokens" "$routing" \
    > "$out/torch_${routing}.jsonl" 2>> "$out/torch.log" || echo "torch peers failed ($routing)"
done
python3 scripts/device/side_by_side_table.py "$out" | tee "$out/table.md"
if [ -n "${OUT:-}" ]; then
  cp "$out/table.md" "$out/cuda_tests.log" "$out/moe_bench.log" "$out/demo_cuda.log" "$OUT/" 2>/dev/null
  tar czf "$OUT/side_by_side.tgz" -C "$out" .
fi

#!/usr/bin/env bash
# The layer beside its PyTorch peers: GPU tests, moe bench and torch (loop, _grouped_mm) on the same points.
# Both routings (balanced, Zipf), one `moe bench --backend cuda --repeats 30` process per shape and routing,
# torch_moe_peers.py on the same shapes, routing construction and token counts; the joined table last.
# Usage: side_by_side [shapes] [tokens]   (defaults: the four bench shapes; T = 1, 16, 128, 1024, 8192)
set -uo pipefail
source scripts/device/lib/common.sh
# NOTE: the device returns 8 files: the table and the logs go to $OUT, everything else in one tarball.
work=/tmp/moe-side-by-side
rm -rf "$work" && mkdir -p "$work"
shapes=${1:-qwen3-30b-a3b,deepseek-v3,mixtral-8x7b,olmoe-1b-7b}
tokens=${2:-1,16,128,1024,8192}
gpu
"$bin/cuda_tests" > "$work/cuda_tests.log" 2>&1
row cuda_tests "$(gtest_counts "$work/cuda_tests.log")"
"$bin/moe" demo --backend cuda > "$work/demo_cuda.log" 2>&1
row "moe demo --backend cuda" "exit $?" "$(grep -m1 '^check' "$work/demo_cuda.log")"
for routing in balanced zipf; do
  for shape in ${shapes//,/ }; do
    "$bin/moe" bench --backend cuda --shape "$shape" --tokens "$tokens" --routing "$routing" --repeats 30 \
      --json "$work/moe_${shape}_${routing}.json" >> "$work/moe_bench.log" 2>&1 || row "moe bench failed" "$shape" "$routing"
  done
  PYTHONUNBUFFERED=1 python3 scripts/device/torch_moe_peers.py "$shapes" "$tokens" "$routing" \
    > "$work/torch_${routing}.jsonl" 2>> "$work/torch.log" || row "torch peers failed" "$routing"
done
python3 scripts/device/side_by_side_table.py "$work" > "$work/table.md"
cat "$work/table.md" >> "$SUMMARY"
cp "$work/table.md" "$work/cuda_tests.log" "$work/moe_bench.log" "$work/demo_cuda.log" "$out/" 2>/dev/null
tar czf "$out/side_by_side.tgz" -C "$work" .

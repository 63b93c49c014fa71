#!/usr/bin/env bash
# The decoder on the GPU: its tests (each op, every fixture family), then moe bench and generate --backend cuda on a random 4-layer Qwen3-30B-A3B shape.
# cuda_decoder_tests and causal_lm_cuda_tests (the MoE blocks alone on the GPU under the host decoder); then,
# where torch and transformers are installed (they build the checkpoint), moe bench --model --backend cuda
# (128-token prompts at batch 1, 16, 64; one 2048-token prompt) and moe generate at batch 16. Logs in $OUT;
# exit 1 if a test or a run fails.
set -uo pipefail
source scripts/device/lib/common.sh
gpu
status=0
for t in cuda_decoder_tests causal_lm_cuda_tests; do
  "$bin/$t" > "$out/$t.log" 2>&1 || status=1
  grep -E '^\[  FAILED  \]|Failure|Expected|Which is|seed|^\[ .*(gpu decoder|op ) ' "$out/$t.log" | head -60
  row "$t" "$(gtest_counts "$out/$t.log")"
done
"$bin/moe" generate --model tests/data/models/qwen3_moe --backend cuda --prompt "The capital of France is" \
  --max-new-tokens 8 > "$out/generate_fixture.log" 2>&1
rc=$?
[ $rc = 0 ] || status=1
row "moe generate --backend cuda (qwen3_moe fixture)" "exit $rc" "$(grep -m1 -E '^(generated|error)' "$out/generate_fixture.log")"
if python3 -c 'import torch, transformers' 2>/dev/null; then
  model=/tmp/moe-qwen3-4l
  python3 scripts/device/random_model.py qwen3-30b-a3b 4 "$model" > "$out/random_model.log" 2>&1
  ids=$(python3 -c 'import random; random.seed(1); print(",".join(str(random.randrange(1, 150000)) for _ in range(128)))')
  "$bin/moe" bench --model "$model" --backend cuda --batch 1,16,64 --prompt-tokens 128 --decode-tokens 64 \
    --repeats 3 > "$out/bench_128.log" 2>&1 || status=1
  "$bin/moe" bench --model "$model" --backend cuda --batch 1 --prompt-tokens 2048 --decode-tokens 8 \
    --repeats 3 > "$out/bench_2048.log" 2>&1 || status=1
  note "qwen3-30b-a3b shape, 4 layers, random bf16 weights; moe bench --model --backend cuda:"
  for f in bench_128 bench_2048; do grep -vE '^loaded' "$out/$f.log" | while read -r line; do note "  $line"; done; done
  args=()
  for _ in $(seq 16); do args+=(--prompt-ids "$ids"); done
  "$bin/moe" generate --model "$model" --backend cuda "${args[@]}" --max-new-tokens 64 > "$out/generate_b16.log" 2>&1 || status=1
  row "moe generate, batch 16 (first forward included)" "$(grep -E '^(prefill|decode):' "$out/generate_b16.log" | tr '\n' ' ')"
fi
exit $status

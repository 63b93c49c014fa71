#!/usr/bin/env bash
# The decoder on the GPU: its tests (each op, every fixture family), then moe generate --backend cuda on a random 4-layer Qwen3-30B-A3B shape.
# cuda_decoder_tests and causal_lm_cuda_tests (the MoE blocks alone on the GPU under the host decoder); then,
# where torch and transformers are installed, prefill and decode tokens/s of 128-token prompts at batch 1
# and 16. Logs in $OUT; exit 1 if a test fails.
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
  for batch in 1 16; do
    args=()
    for _ in $(seq "$batch"); do args+=(--prompt-ids "$ids"); done
    "$bin/moe" generate --model "$model" --backend cuda "${args[@]}" --max-new-tokens 64 > "$out/generate_b$batch.log" 2>&1 || status=1
    row "qwen3-30b-a3b 4 layers, batch $batch" "$(grep -E '^(prefill|decode):' "$out/generate_b$batch.log" | tr '\n' ' ')"
  done
fi
exit $status

#!/usr/bin/env bash
# Full-depth models on random weights made in GPU memory (moe bench --random-model, no checkpoint on disk):
# cuda_decoder_tests first (RANDOM_MODEL_TESTS=0 skips them), then the Qwen3-30B-A3B shape at 48 layers
# (128-token prompts at batch 1, 16, 64; one 2048-token prompt) and Mixtral-8x7B and DeepSeek-V2-Lite at
# batch 1 and 16; then, where torch and transformers are installed, transformers `generate` on the same
# Qwen3 shape (hf_random_generate.py; RANDOM_MODEL_HF=0 skips it). Logs in $OUT; the tables last; exit 1 if a
# test or a run fails.
set -uo pipefail
source scripts/device/lib/common.sh
gpu
status=0
if [ "${RANDOM_MODEL_TESTS:-1}" = 1 ]; then
  "$bin/cuda_decoder_tests" > "$out/cuda_decoder_tests.log" 2>&1 || status=1
  grep -E '^\[  FAILED  \]|Failure|Expected|Which is' "$out/cuda_decoder_tests.log" | head -40
  row cuda_decoder_tests "$(gtest_counts "$out/cuda_decoder_tests.log")"
fi
bench() {  # LOG ARGS...
  local log=$1
  shift
  "$bin/moe" bench --backend cuda --repeats 3 "$@" > "$out/$log.log" 2>&1 || status=1
  note "moe bench $*:"
  while read -r line; do note "  $line"; done < "$out/$log.log"
}
bench qwen3_128 --random-model qwen3-30b-a3b --batch 1,16,64 --prompt-tokens 128 --decode-tokens 64
bench qwen3_2048 --random-model qwen3-30b-a3b --batch 1 --prompt-tokens 2048 --decode-tokens 8
bench mixtral_128 --random-model mixtral-8x7b --batch 1,16 --prompt-tokens 128 --decode-tokens 32
bench dsv2lite_128 --random-model deepseek-v2-lite --batch 1,16 --prompt-tokens 128 --decode-tokens 64
here=$(cd "$(dirname "$0")" && pwd)
scripts=$here
[ -f "$scripts/hf_random_generate.py" ] || scripts=$here/..
if [ "${RANDOM_MODEL_HF:-1}" = 1 ] && python3 -c 'import torch, transformers' 2>/dev/null; then
  python3 "$scripts/hf_random_generate.py" qwen3-30b-a3b 48 128 32 1,16 > "$out/hf_qwen3.log" 2>&1 || status=1
  note "transformers generate, qwen3-30b-a3b shape, 48 layers, random bf16, 128-token prompts:"
  while read -r line; do note "  $line"; done < <(grep -E '^(transformers|hf batch)' "$out/hf_qwen3.log")
fi
exit $status

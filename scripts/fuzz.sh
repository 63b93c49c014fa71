#!/usr/bin/env bash
# The libFuzzer fuzzers of tests/fuzz (docs/fuzzing.md): builds them with clang into build-fuzz/
# (-DMOE_FUZZ=ON: -fsanitize=fuzzer,address,undefined) and runs each for SECONDS (default 30), two at a
# time, from its committed seed corpus. New coverage goes to build-fuzz/corpus/<name> (never into the
# repository); a crash leaves build-fuzz/artifacts/<name>/crash-* and fails the script.
#   scripts/fuzz.sh [SECONDS] [NAME...]   run (all targets when no NAME)
#   scripts/fuzz.sh --seeds               rebuild the committed seed corpora under tests/fuzz/corpus
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-fuzz
targets=(safetensors checkpoint_index moe_config model_config tokenizer_json tokenizer_text layer_input chat_template)

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=OFF -DMOE_FUZZ=ON \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null

if [ "${1:-}" = "--seeds" ]; then
  cmake --build "$build" --parallel "$(nproc)" --target fuzz_make_seeds
  corpus=tests/fuzz/corpus
  rm -rf "$corpus"
  "$build/bin/fuzz_make_seeds" "$corpus"  # safetensors/ and layer_input/
  mkdir -p "$corpus"/{checkpoint_index,moe_config,model_config,tokenizer_json,tokenizer_text,chat_template}
  cp tests/data/models/deepseek_v3/model.safetensors.index.json "$corpus/checkpoint_index/deepseek_v3.json"
  printf '{"metadata": {"total_size": 80}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}}\n' \
    >"$corpus/checkpoint_index/two_shards.json"
  for f in tests/data/configs/*.json; do cp "$f" "$corpus/moe_config/"; done
  for d in tests/data/models/*/; do
    family=$(basename "$d")
    cp "$d/config.json" "$corpus/moe_config/$family.json"
    cp "$d/config.json" "$corpus/model_config/$family.json"
    # config.json, the part separator of tests/fuzz/fuzz_target.h, then generation_config.json
    { cat "$d/config.json"; printf '\n#MOE-PART#\n'; cat "$d/generation_config.json"; } >"$corpus/model_config/$family-generation.json"
  done
  for d in tests/data/tokenizers/*/; do cp "$d/tokenizer.json" "$corpus/tokenizer_json/$(basename "$d").json"; done
  cp tests/data/models/qwen3_moe/tokenizer.json "$corpus/tokenizer_json/model_fixtures.json"
  cp tests/data/models/mixtral/tokenizer.json "$corpus/tokenizer_json/mixtral.json"
  # The families' real chat templates, and one with its own messages after the part separator.
  for f in tests/data/chat_templates/*.jinja; do cp "$f" "$corpus/chat_template/"; done
  { cat tests/data/chat_templates/qwen3_moe.jinja; printf '\n#MOE-PART#\n'
    printf '[{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\\nr\\n</think>\\n\\na"}]'; } \
    >"$corpus/chat_template/qwen3_moe-messages.jinja"
  # Byte 0 picks the tokenizer (tests/data/tokenizers in name order) and add/skip_special_tokens.
  i=0
  for text in "Hello world" "Hello, world! How are you?" "  two leading spaces" "tabs	and
newlines" "numbers 12345 and 3.14" "émigré café 中文 😀" "<|im_end|><s></s> x"; do
    printf "\\x$(printf %02x $((i % 10)))%s" "$text" >"$corpus/tokenizer_text/case$i.txt"
    i=$((i + 1))
  done
  exit 0
fi

seconds=${1:-30}
shift || true
(($#)) && targets=("$@")
cmake --build "$build" --parallel "$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}")

# One target: libFuzzer from the committed seeds plus what earlier runs here found.
run_one() {
  local name=$1 work="$build/corpus/$1" artifacts="$build/artifacts/$1"
  mkdir -p "$work" "$artifacts"
  # NOTE: -malloc_limit_mb makes a single allocation above 512 MB a crash: no input of these sizes needs one,
  # so it is a size read from the input and trusted (docs/fuzzing.md, limits).
  MOE_NUM_THREADS=2 "$build/bin/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="$artifacts/" "$work" "tests/fuzz/corpus/$name" \
    >"$build/fuzz_$name.log" 2>&1
}

failed=()
pending=("${targets[@]}")
while ((${#pending[@]})); do
  batch=("${pending[@]:0:2}")
  pending=("${pending[@]:2}")
  pids=()
  for name in "${batch[@]}"; do run_one "$name" & pids+=($!); done
  for i in "${!pids[@]}"; do
    name=${batch[$i]}
    if wait "${pids[$i]}"; then
      runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/fuzz_$name.log" | grep -o '[0-9]*$' || echo '?')
      echo "fuzz $name: ${seconds} s, $runs executions, no crash"
    else
      echo "fuzz $name: FAILED (log $build/fuzz_$name.log, inputs in $build/artifacts/$name/):"
      grep -E 'ERROR|SUMMARY|invariant|terminate|==[0-9]+==' "$build/fuzz_$name.log" | head -20
      failed+=("$name")
    fi
  done
done
((${#failed[@]} == 0)) || { echo "fuzzing found crashes in: ${failed[*]}"; exit 1; }

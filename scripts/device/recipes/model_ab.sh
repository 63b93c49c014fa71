#!/usr/bin/env bash
# A/B of settings on a full-depth model on random weights (moe bench --random-model): each setting its own
# process, the settings alternated within each round, the decode tok/s of every batch in a table last.
#   SETTINGS  space-separated settings, each `default` or VAR=value;VAR=value (environment overrides)
#   ROUNDS    rounds (default 2); MODEL (default qwen3-30b-a3b); BATCH (default 1,16,64)
# cuda_decoder_tests first unless AB_TESTS=0. Compare rows only within one call.
set -uo pipefail
source scripts/device/lib/common.sh
gpu
status=0
if [ "${AB_TESTS:-1}" = 1 ]; then
  "$bin/cuda_decoder_tests" > "$out/cuda_decoder_tests.log" 2>&1 || status=1
  grep -E '^\[  FAILED  \]|Failure|Expected|Which is' "$out/cuda_decoder_tests.log" | head -40
  row cuda_decoder_tests "$(gtest_counts "$out/cuda_decoder_tests.log")"
fi
model=${MODEL:-qwen3-30b-a3b}
note "decode tok/s, $model, 128-token prompts, 64 steps (round, setting, then one column a batch):"
for round in $(seq "${ROUNDS:-2}"); do
  for setting in ${SETTINGS:-default}; do
    overrides=()
    [ "$setting" != default ] && IFS=';' read -r -a overrides <<< "$setting"
    log="$out/ab_${round}_$(echo "$setting" | tr -c 'A-Za-z0-9_=\n' '_').log"
    env "${overrides[@]}" "$bin/moe" bench --backend cuda --repeats 3 --random-model "$model" \
      --batch "${BATCH:-1,16,64}" --prompt-tokens 128 --decode-tokens 64 > "$log" 2>&1 || status=1
    row "$round" "$setting" $(awk '$1 ~ /^[0-9]+$/ && NF >= 6 {print $1 ": " $3}' "$log" | tr '\n' ' ')
  done
done
exit $status

#!/usr/bin/env bash
# The GPU engine's recorded standing in one call: tests, random_model, serve at 48 layers, step_kernels.
# One call, since each starts a machine (minutes of the session's device time): the tests recipe (cuda_tests,
# causal_lm_cuda_tests, the demo), random_model (cuda_decoder_tests, the full-depth benches, transformers
# beside them), serve on the 48-layer Qwen3 shape, then the kernels of a decode step. Each part's table in
# the summary; every log and JSON in $OUT/standing.tgz (the device returns 8 files); exit 1 if a part fails.
set -uo pipefail
source scripts/device/lib/common.sh
status=0
part() {  # NAME [ENV=VALUE...]: the recipe NAME with the environment given, its output in $out/parts/NAME.log
  local name=$1
  shift
  mkdir -p "$out/parts"
  note "== $name"
  env "$@" OUT="$out/parts" bash "scripts/device/recipes/$name.sh" > "$out/parts/$name.log" 2>&1 || {
    status=1
    note "$name: failed (see parts/$name.log)"
  }
}
part tests
part random_model
part serve RANDOM_MODEL=qwen3-30b-a3b
part step_kernels
tar czf "$out/standing.tgz" -C "$out" parts && rm -rf "$out/parts"
exit $status

#!/usr/bin/env bash
# A/B of bench points: settings and builds alternated within each round, one process a point; a table last.
# A point is shape:tokens:rounds[:VAR=value;VAR=value[:moe binary]]; its settings (environment overrides
# such as MOE_TILE_ROWS=32) and its binary's folder, where not the carry's (e.g. a base build carried as
# .device-carry/base/moe), label its rows. Optional before the points: TESTS (a cuda_tests filter, * for
# all), MODEL_TESTS=1 (causal_lm_cuda_tests), NCU="shape:T ..." (the kernels of one forward, as `ncu kernels`).
# ROUTING=balanced|zipf. Compare rows only within one call: the spread between processes and cards is 2-5%.
# Usage: [POINTS="..."] ab      (default: Qwen3 and Mixtral at T = 16-128, 2 rounds; DeepSeek-V3, 1 round)
set -uo pipefail
source scripts/device/lib/common.sh
work=/tmp/moe-ab && rm -rf "$work" && mkdir -p "$work"
points=${POINTS:-"qwen3-30b-a3b:16,32,64,128:2 mixtral-8x7b:16,32,64,128:2 deepseek-v3:16,32,64,128:1"}
gpu
if [ -n "${TESTS:-}" ]; then
  timeout 300 "$bin/cuda_tests" --gtest_filter="$TESTS" > "$work/cuda_tests.log" 2>&1
  row cuda_tests "rc $?" "$(gtest_counts "$work/cuda_tests.log")"
  grep -E '^\[  FAILED  \]|Failure|Expected|Which is|seed' "$work/cuda_tests.log" | head -30
fi
if [ -n "${MODEL_TESTS:-}" ]; then
  timeout 300 "$bin/causal_lm_cuda_tests" > "$work/causal_lm_cuda_tests.log" 2>&1
  row causal_lm_cuda_tests "rc $?" "$(gtest_counts "$work/causal_lm_cuda_tests.log")"
fi
[ -n "${NCU:-}" ] && bash scripts/device/recipes/ncu.sh kernels "$NCU"
max_rounds=1
for point in $points; do
  IFS=: read -r _ _ rounds _ _ <<< "$point"
  [ "${rounds:-1}" -gt "$max_rounds" ] && max_rounds=${rounds:-1}
done
for round in $(seq "$max_rounds"); do  # the points alternate within each round
  for point in $points; do
    IFS=: read -r shape tokens rounds settings moe <<< "$point"
    [ "$round" -gt "${rounds:-1}" ] && continue
    moe=${moe:-$bin/moe}
    label=${settings:-default}
    [ "$moe" != "$bin/moe" ] && label="$label@$(basename "$(dirname "$moe")")"
    env ${settings//;/ } timeout 240 "$moe" bench --backend cuda --shape "$shape" --tokens "$tokens" \
      --repeats 30 --routing "${ROUTING:-balanced}" > "$work/bench.tmp" 2>&1 || echo "$shape $label round $round: rc $?"
    echo "== $shape $label round $round" >> "$work/bench.log"
    cat "$work/bench.tmp" >> "$work/bench.log"
    grep -E "^$shape" "$work/bench.tmp" | awk -v r="$round" -v l="$label" -v OFS='\t' '{print r, $1, $2, l, $5, $8, $9}' >> "$work/table.txt"
    grep -E "ceilings" "$work/bench.tmp" | sed "s/^/$shape $label round $round: /"
  done
done
tar czf "$out/ab.tgz" -C "$work" .
note "round	shape	T	setting	us median	floor us	x floor"
sort -t$'\t' -k2,2 -k3,3n -k4,4 -k1,1n "$work/table.txt" >> "$SUMMARY"

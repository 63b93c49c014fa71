#!/usr/bin/env bash
# On the device, one call (issue 5, 16 <= T <= 128): `moe bench --backend cuda` at mid-size batches on the
# three shapes, then the kernels of one forward under ncu (scripts/device/ncu_ab.sh) at a few points, to see
# where the time above the floor goes. Needs a carry of scripts/device/prepare_carry.sh
# (CARRY, default .device-carry). Logs packed into $OUT/midt.tgz; a compact table last.
# Usage: [POINTS="shape:tokens:rounds[:VAR=value;VAR=value[:moe binary]] ..."] [NCU="shape:T ..."]
#          [TESTS=gtest filter, or * for all] [MODEL_TESTS=1] [ROUTING=balanced|zipf] bash scripts/device/midt_bench.sh
# A point's settings (environment overrides such as MOE_TILE_ROWS=32) and its binary's folder, where not
# the carry's (e.g. a baseline build carried in .device-carry/base/moe), label its rows in the table; the
# points alternate within each round.
set -uo pipefail
source scripts/device/carry_env.sh
work=/tmp/midt && rm -rf "$work" && mkdir -p "$work"
points=${POINTS:-"qwen3-30b-a3b:16,32,64,128:2 mixtral-8x7b:16,32,64,128:2 deepseek-v3:16,32,64,128:1"}
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
if [ -n "${TESTS:-}" ]; then
  timeout 300 "$bin/cuda_tests" --gtest_filter="$TESTS" > "$work/cuda_tests.log" 2>&1
  echo "cuda_tests: rc $? $(grep -E '^\[  (PASSED|FAILED)' "$work/cuda_tests.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]|Failure|Expected|Which is|seed' "$work/cuda_tests.log" | head -30
fi
if [ -n "${MODEL_TESTS:-}" ]; then
  timeout 300 "$bin/causal_lm_cuda_tests" > "$work/causal_lm_cuda_tests.log" 2>&1
  echo "causal_lm_cuda_tests: rc $? $(grep -E '^\[  (PASSED|FAILED)' "$work/causal_lm_cuda_tests.log" | tr '\n' ' ')"
fi
# The kernels of one forward under ncu at each NCU point (scripts/device/ncu_ab.sh: tables here, logs in
# $OUT/ncu_ab.tgz).
[ -n "${NCU:-}" ] && POINTS="$NCU" bash scripts/device/ncu_ab.sh
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
    grep -E "^$shape" "$work/bench.tmp" | awk -v r="$round" -v l="$label" '{print r, $1, $2, l, $5, $8, $9}' >> "$work/table.txt"
    grep -E "ceilings" "$work/bench.tmp" | sed "s/^/$shape $label round $round: /"
  done
done
tar czf "$out/midt.tgz" -C "$work" .
echo "round shape tokens setting us_median floor_us xfloor"
sort -k2,2 -k3,3n -k4,4 -k1,1n "$work/table.txt"

#!/usr/bin/env bash
# On the device, one call per iteration of the fused decode path (issue 5): its GPU tests first (a hang or
# a wrong result stops the run), then the other GPU tests, then `moe bench --backend cuda` at decode token
# counts with the fused path (MOE_DECODE_MAX_TOKENS=8) and with the kernel chain it replaces
# (MOE_DECODE_MAX_TOKENS=0) in the same run; PEERS=balanced[,zipf] adds the torch peers for those routings and
# one side-by-side table; PHASES=1 first prints the fused kernel's phase times (CudaDecode.DISABLED_PhaseTimes*).
# Needs a carry folder from scripts/device/prepare_carry.sh: CARRY names it (default .device-carry).
# Usage: [CHAIN=shapes] [NOPREFETCH=1] [PEERS=routings] [PHASES=1] decode_bench.sh [shapes] [tokens] [routings]
set -uo pipefail
source scripts/device/carry_env.sh
work=/tmp/decode-bench && rm -rf "$work" && mkdir -p "$work"  # packed into one file: the device returns 8
shapes=${1:-qwen3-30b-a3b,deepseek-v3,mixtral-8x7b}
tokens=${2:-1,2,4,8,16}
routings=${3:-balanced}
chain=${CHAIN:-$shapes}  # shapes also timed with the kernel chain (MOE_DECODE_MAX_TOKENS=0)
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
summary() { grep -E '^\[  (PASSED|FAILED)|^\[  FAILED' "$1" | tr '\n' ' '; }
timeout 120 "$bin/cuda_tests" --gtest_filter='CudaDecode*' > "$out/tests_decode.log" 2>&1
rc=$?
echo "decode tests: rc $rc $(summary "$out/tests_decode.log")"
if [ $rc -ne 0 ]; then grep -E "Failure|Expected|Which is|seed|error|T [0-9]|choice|output" "$out/tests_decode.log" | head -30; exit 1; fi
if [ -n "${PHASES:-}" ]; then
  timeout 90 "$bin/cuda_tests" --gtest_also_run_disabled_tests --gtest_filter='CudaDecode.DISABLED_*' 2>&1 |
    grep -E " T [0-9]|FAIL" | tee "$out/phases.log"
fi
timeout 200 "$bin/cuda_tests" --gtest_filter='-CudaDecode*' > "$out/tests_rest.log" 2>&1
echo "other cuda_tests: rc $? $(summary "$out/tests_rest.log")"
grep -hE "Failure|Expected|Which is|seed|error" "$out/tests_rest.log" | head -20
bench() {  # name, env..., then shape routing
  local name=$1 shape=$2 routing=$3
  shift 3
  env "$@" timeout 150 "$bin/moe" bench --backend cuda --shape "$shape" --tokens "$tokens" --routing "$routing" \
    --repeats 30 --json "$work/${name}_${shape}_${routing}.json" > "$work/bench.tmp" 2>&1
  local rc=$?
  cat "$work/bench.tmp" >> "$out/bench.log"
  echo "== $shape $routing $name (rc $rc)"
  grep -E "^$shape|ceilings|rror" "$work/bench.tmp"
}
for routing in ${routings//,/ }; do
  for shape in ${shapes//,/ }; do
    bench fused "$shape" "$routing" MOE_DECODE_MAX_TOKENS=8
    [ "$routing" = balanced ] && [[ ",$chain," == *",$shape,"* ]] && bench chain "$shape" "$routing" \
      MOE_DECODE_MAX_TOKENS=0
    [ -n "${NOPREFETCH:-}" ] && [ "$shape" = qwen3-30b-a3b ] && bench noprefetch "$shape" "$routing" \
      MOE_DECODE_MAX_TOKENS=8 MOE_DECODE_PREFETCH=0
  done
  if [ -n "${PEERS:-}" ] && [[ ",${PEERS}," == *",$routing,"* ]]; then
    PYTHONUNBUFFERED=1 timeout 200 python3 scripts/device/torch_moe_peers.py "$shapes" "$tokens" "$routing" \
      > "$work/torch_${routing}.jsonl" 2>> "$out/torch.log" || echo "torch peers failed ($routing)"
  fi
done
# The side-by-side table of the fused path (moe_*.json) against the peers.
if [ -n "${PEERS:-}" ]; then
  mkdir -p "$work/table" && cp "$work"/torch_*.jsonl "$work/table/" 2>/dev/null
  for f in "$work"/fused_*.json; do cp "$f" "$work/table/moe_${f##*/fused_}"; done
  python3 scripts/device/side_by_side_table.py "$work/table" | tee "$out/table.md"
fi
rm -f "$work/bench.tmp"
tar czf "$out/decode_json.tgz" -C "$work" .

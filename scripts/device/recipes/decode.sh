#!/usr/bin/env bash
# Decode batches: the fused decode kernel against the kernel chain it replaces, and optionally the torch peers.
# Its GPU tests first (a hang or a wrong result stops the run), then the other GPU tests, then
# `moe bench --backend cuda` at decode token counts with the fused path (MOE_DECODE_MAX_TOKENS=8) and with the
# chain (MOE_DECODE_MAX_TOKENS=0) in the same run; PEERS=balanced[,zipf] adds the torch peers for those
# routings and one side-by-side table; PHASES=1 first prints the fused kernel's phase times
# (CudaDecode.DISABLED_PhaseTimes*); CHAIN=shapes limits the chain runs; NOPREFETCH=1 adds Qwen3 with
# MOE_DECODE_PREFETCH=0.
# Usage: decode [shapes] [tokens] [routings]   (defaults: three shapes; T = 1, 2, 4, 8, 16; balanced)
set -uo pipefail
source scripts/device/lib/common.sh
work=/tmp/decode-bench && rm -rf "$work" && mkdir -p "$work"  # packed into one file: the device returns 8
shapes=${1:-qwen3-30b-a3b,deepseek-v3,mixtral-8x7b}
tokens=${2:-1,2,4,8,16}
routings=${3:-balanced}
chain=${CHAIN:-$shapes}
gpu
timeout 120 "$bin/cuda_tests" --gtest_filter='CudaDecode*' > "$out/tests_decode.log" 2>&1
rc=$?
row "decode tests" "rc $rc" "$(gtest_counts "$out/tests_decode.log")"
if [ $rc -ne 0 ]; then grep -E "Failure|Expected|Which is|seed|error|T [0-9]|choice|output" "$out/tests_decode.log" | head -30; exit 1; fi
if [ -n "${PHASES:-}" ]; then
  timeout 90 "$bin/cuda_tests" --gtest_also_run_disabled_tests --gtest_filter='CudaDecode.DISABLED_*' 2>&1 |
    grep -E " T [0-9]|FAIL" | tee "$out/phases.log"
fi
timeout 200 "$bin/cuda_tests" --gtest_filter='-CudaDecode*' > "$out/tests_rest.log" 2>&1
row "other cuda_tests" "rc $?" "$(gtest_counts "$out/tests_rest.log")"
grep -hE "Failure|Expected|Which is|seed|error" "$out/tests_rest.log" | head -20
note "path	shape	routing	T	us	x floor"
bench() {  # name shape routing [VAR=value...]
  local name=$1 shape=$2 routing=$3
  shift 3
  env "$@" timeout 150 "$bin/moe" bench --backend cuda --shape "$shape" --tokens "$tokens" --routing "$routing" \
    --repeats 30 --json "$work/${name}_${shape}_${routing}.json" > "$work/bench.tmp" 2>&1
  local rc=$?
  cat "$work/bench.tmp" >> "$work/bench.log"
  echo "== $shape $routing $name (rc $rc)"
  grep -E "^$shape|ceilings|rror" "$work/bench.tmp"
  python3 - "$work/${name}_${shape}_${routing}.json" "$name" >> "$SUMMARY" 2>/dev/null <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print("\t".join([sys.argv[2], r["shape"], r["routing"], str(r["tokens"]), f'{r["us_median"]:.1f}', f'{r["ratio_to_floor"]:.2f}']))
PY
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
      > "$work/torch_${routing}.jsonl" 2>> "$out/torch.log" || row "torch peers failed" "$routing"
  fi
done
# The side-by-side table of the fused path (moe_*.json) against the peers.
if [ -n "${PEERS:-}" ]; then
  mkdir -p "$work/table" && cp "$work"/torch_*.jsonl "$work/table/" 2>/dev/null
  for f in "$work"/fused_*.json; do cp "$f" "$work/table/moe_${f##*/fused_}"; done
  python3 scripts/device/side_by_side_table.py "$work/table" | tee "$out/table.md" >> "$SUMMARY"
fi
rm -f "$work/bench.tmp"
tar czf "$out/decode_json.tgz" -C "$work" .

#!/usr/bin/env bash
# Quantised experts (fp8 or int4): their GPU tests, then `moe bench --backend cuda --cuda-weights W` (beside bf16).
# The tests first (the device quantisers bit for bit, the fp8 grouped GEMMs against float64, the fp8 / int4
# fused decode path and the fp8 grouped path against the CPU, the bf16 decode and grouped GEMM tests beside
# them); then on each shape the bench at the default decode limit, and optionally at fused tokens with the
# fused path taking them (MOE_DECODE_MAX_TOKENS=8: both layers fused, for the quantised kernel's time).
# Usage: quantised fp8|int4 [shapes] [tokens] [fused tokens]   (defaults: three shapes; T = 1 to 128 in
# powers of 2 (int4: 1 to 16); fused '-': none, e.g. 4,8)
set -uo pipefail
source scripts/device/lib/common.sh
weights=${1:-fp8}
shapes=${2:-qwen3-30b-a3b,deepseek-v3,mixtral-8x7b}
if [ "$weights" = int4 ]; then default_tokens=1,2,4,8,16; else default_tokens=1,2,4,8,16,32,64,128; fi
tokens=${3:-$default_tokens}
fused=${4:--}
work=/tmp/quantised-bench && rm -rf "$work" && mkdir -p "$work"  # packed into one file: the device returns 8
gpu
if [ "$weights" = int4 ]; then filter='Int4*:CudaDecodeInt4*:CudaDecode.*'
else filter='Fp8*:CudaDecodeFp8*:CudaGroupedGemmFp8*:CudaLayerFp8*:CudaDecode.*:CudaGroupedGemm*'; fi
timeout 300 "$bin/cuda_tests" --gtest_filter="$filter" > "$out/tests_$weights.log" 2>&1
rc=$?
row "$weights + decode tests" "rc $rc" "$(gtest_counts "$out/tests_$weights.log")"
if [ $rc -ne 0 ]; then grep -E "Failure|Expected|Which is|seed|error|T [0-9]|choice|output" "$out/tests_$weights.log" | head -30; fi
note "shape	T	limit	bf16 us	$weights us	$weights/bf16	$weights TB/s	$weights path"
bench() {  # name tokens [VAR=value...]
  local name=$1 shape=$2 list=$3
  shift 3
  env "$@" timeout 200 "$bin/moe" bench --backend cuda --cuda-weights "$weights" --shape "$shape" --tokens "$list" \
    --repeats 30 --json "$work/${name}_${shape}.json" > "$work/bench.tmp" 2>&1
  echo "== $shape $name (rc $?)"
  cat "$work/bench.tmp"
  python3 - "$work/${name}_${shape}.json" "$name" "$weights" >> "$SUMMARY" 2>/dev/null <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
for r in rows:
    if r["weights"] != sys.argv[3]:
        continue
    print(f'{r["shape"]}\t{r["tokens"]}\t{sys.argv[2]}\t{r["peer"]["us"]:.1f}\t{r["us_median"]:.1f}\t'
          f'{r["us_median"] / r["peer"]["us"]:.2f}\t{r["weight_tbps"]:.2f}\t{r["path"]}')
PY
}
for shape in ${shapes//,/ }; do bench default "$shape" "$tokens"; done
if [ "$fused" != - ]; then
  for shape in ${shapes//,/ }; do bench fused8 "$shape" "$fused" MOE_DECODE_MAX_TOKENS=8; done
fi
tar czf "$out/${weights}_bench.tar.gz" -C "$work" .

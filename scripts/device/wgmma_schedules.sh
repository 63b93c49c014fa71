#!/usr/bin/env bash
# On the device, one call (issue 5, wgmma iterations): the carried kernel's SASS (HGMMA, no local memory),
# the GPU tests, `moe bench --backend cuda` on the prefill shapes under the default WgmmaSchedule policy and
# with its choices overridden (VARIANTS), a per-kernel time and DRAM split of one DeepSeek-V3 and one Qwen3
# forward at T = 8192 (ncu) under the default and each NCU_VARIANTS override, and the torch peers; then the
# side-by-side table of the default. Logs, JSON and tables to $OUT.
# Needs a carry folder from scripts/device/prepare_carry.sh (or prepare_nccl_carry.sh): CARRY names it
# (default .device-carry).
# Usage: wgmma_schedules.sh [shapes] [tokens]
#   VARIANTS="name shape tokens VAR=value...;..."  bench overrides (MOE_WGMMA_HALF_TILES, MOE_WGMMA_RASTER_ROWS,
#                                                  MOE_WGMMA_L2), default: the L2 hints off and A+B hinted
#   NCU_VARIANTS="name VAR=value...;..."           ncu overrides, default: the L2 hints off
#   PEERS=0                                        skips the torch peers and the table
set -uo pipefail
source scripts/device/carry_env.sh
work=/tmp/wgmma-schedules && rm -rf "$work" && mkdir -p "$work"  # packed into one tarball: $OUT returns 8 files
shapes=${1:-deepseek-v3,qwen3-30b-a3b,mixtral-8x7b}
tokens=${2:-1024,8192}
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
summary() { grep -E '^\[  (PASSED|FAILED)' "$1" | tr '\n' ' '; }
finish() {
  tar czf "$out/wgmma_schedules.tgz" -C "$work" .
  cp "$work"/summary.txt "$out/" 2>/dev/null
}

# SASS of the two wgmma kernel instances: tensor-core instructions present, no local-memory traffic.
cuobjdump -sass "$bin/cuda_tests" > "$work/sass.txt" 2>&1
awk '/Function : /{f = /wgmma_grouped_gemm_kernel/} f' "$work/sass.txt" > "$work/sass_wgmma.txt"
echo "SASS wgmma kernels: $(grep -c 'Function :' "$work/sass_wgmma.txt") functions, $(grep -c HGMMA "$work/sass_wgmma.txt") HGMMA, $(grep -cE '\b(LDL|STL)\b' "$work/sass_wgmma.txt") LDL/STL"
grep -nE 'Function :|\b(LDL|STL)\b' "$work/sass_wgmma.txt" | grep -B1 -E 'LDL|STL' | head -12

# The kernel's own tests first: a hang or a wrong result stops the run before it costs more device time.
timeout 90 "$bin/cuda_tests" --gtest_filter='CudaWgmma*' > "$work/tests_kernel.log" 2>&1
rc=$?
echo "wgmma kernel tests: rc $rc $(summary "$work/tests_kernel.log")"
if [ $rc -ne 0 ]; then grep -E "Failure|Expected|Which is|seed|schedule|error|row" "$work/tests_kernel.log" | head -20; finish; exit 1; fi
timeout 200 "$bin/cuda_tests" > "$work/tests_all.log" 2>&1
echo "cuda_tests (all): rc $? $(summary "$work/tests_all.log")"
grep -hE "Failure|Expected|Which is|seed|error" "$work/tests_all.log" | head -10

# The layer under the default policy (the table's numbers), then the choices it overrides, one at a time.
run_bench() {  # name shape tokens [VAR=value]
  local name=$1 shape=$2 toks=$3 dir="$work/schedule_$1" && shift 3
  mkdir -p "$dir"
  env "$@" timeout 120 "$bin/moe" bench --backend cuda --shape "$shape" --tokens "$toks" --repeats 20 \
    --json "$dir/moe_${shape}_balanced.json" > "$work/bench.tmp" 2>&1
  local rc=$?
  cat "$work/bench.tmp" >> "$work/bench.log"
  echo "== $shape $name (rc $rc)"
  grep -E "^$shape|rror" "$work/bench.tmp"
}
variants=${VARIANTS:-"l2_off deepseek-v3,qwen3-30b-a3b,mixtral-8x7b 1024,8192 MOE_WGMMA_L2=normal,normal;l2_last_first deepseek-v3,qwen3-30b-a3b,mixtral-8x7b 1024,8192 MOE_WGMMA_L2=last,first"}
ncu_variants=${NCU_VARIANTS:-"l2_off MOE_WGMMA_L2=normal,normal"}
{
  for shape in ${shapes//,/ }; do run_bench default "$shape" "$tokens"; done
  IFS=';' read -ra list <<< "$variants"
  for v in "${list[@]}"; do
    read -ra words <<< "$v"
    for shape in ${words[1]//,/ }; do run_bench "${words[0]}" "$shape" "${words[2]}" "${words[@]:3}"; done
  done
} | tee -a "$work/summary.txt"

# Where one forward's time goes: every kernel of the first forward after the 13 cuBLAS launches of the
# matmul ceiling, with its DRAM bytes (ncu; clocks left as they are).
IFS=';' read -ra ncu_list <<< "default;$ncu_variants"
for v in "${ncu_list[@]}"; do
  read -ra words <<< "$v"
  name=${words[0]}
  for shape in deepseek-v3 qwen3-30b-a3b; do
    env "${words[@]:1}" timeout 150 ncu --clock-control none --print-units base --print-kernel-base function --csv \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --launch-skip 13 --launch-count 30 \
      --log-file "$work/ncu_${shape}_$name.csv" "$bin/moe" bench --backend cuda --shape "$shape" --tokens 8192 --repeats 3 \
      > "$work/ncu_${shape}_$name.out" 2>&1
    echo "== ncu $shape T=8192 $name (rc $?)"
    python3 scripts/device/ncu_table.py "$work/ncu_${shape}_$name.csv"
  done
done | tee -a "$work/summary.txt"

# The torch peers once; a table for every schedule against them.
if [ "${PEERS:-1}" = 0 ]; then finish; exit 0; fi
PYTHONUNBUFFERED=1 timeout 150 python3 scripts/device/torch_moe_peers.py "$shapes" "$tokens" balanced \
  > "$work/torch_balanced.jsonl" 2> "$work/torch.log" || echo "torch peers failed: $(tail -3 "$work/torch.log")"
for dir in "$work"/schedule_default; do
  cp "$work/torch_balanced.jsonl" "$dir/"
  echo "== table, ${dir##*/}"
  python3 scripts/device/side_by_side_table.py "$dir" | tee "$dir/table.md"
done | tee -a "$work/summary.txt"
finish

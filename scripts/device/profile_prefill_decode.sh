#!/usr/bin/env bash
# On the device, one call (issue 5): where the time of the two regimes that miss their targets goes.
# (1) DeepSeek-V3 T = 8192: time, DRAM bytes and L2 hit rate of every kernel of one forward (ncu metrics,
#     tabulated by ncu_table.py);
# (2) Qwen3-30B-A3B T = 1: the fused decode kernel's warp states and source counters (ncu WarpStateStats and
#     SourceCounters sections), to find what holds up its routing.
# Needs a carry folder from scripts/device/prepare_carry.sh (CARRY, default .device-carry). Logs in $OUT.
set -uo pipefail
source scripts/device/carry_env.sh
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
# The bench's first launches are the cuBLAS and copy ceilings (13 launches), then one forward's kernels.
timeout 200 ncu --clock-control none --print-units base --csv --metrics "$metrics" --launch-skip 13 --launch-count 14 \
  --log-file "$out/ncu_prefill.csv" "$bin/moe" bench --backend cuda --shape deepseek-v3 --tokens 8192 --repeats 3 \
  > "$out/ncu_prefill.out" 2>&1
echo "== ncu deepseek-v3 T=8192 (rc $?)"
python3 scripts/device/ncu_table.py "$out/ncu_prefill.csv"
timeout 200 ncu --clock-control none --kernel-name regex:decode_layer --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no \
  "$bin/moe" bench --backend cuda --shape qwen3-30b-a3b --tokens 1 --repeats 3 > "$out/ncu_decode.txt" 2>&1
echo "== ncu qwen3-30b-a3b T=1 decode kernel (rc $?)"
grep -vE "^==PROF==|^ +-+$" "$out/ncu_decode.txt" | sed -n '/Section: Warp State/,$p' | head -60

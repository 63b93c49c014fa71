#!/usr/bin/env bash
# Nsight Compute's speed-of-light, launch and warp-stall sections for the small kernels of a decode step
# (KERNELS: a regex of kernel names) on the Qwen3-30B-A3B shape cut to 2 layers, eager, batch BATCH (1).
# The report in $OUT/kernel_stalls.txt; the stall reasons of each kernel, summed, last.
set -uo pipefail
source scripts/device/lib/common.sh
gpu
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
model=/tmp/moe-kernel-stalls.json
python3 -c 'import sys; sys.path.insert(0, "scripts/device"); import random_model
random_model.SHAPES["qwen3-30b-a3b"](2).to_json_file(sys.argv[1])' "$model"
timeout 400 "$ncu" --clock-control none --cache-control none --section SpeedOfLight --section LaunchStats \
  --section WarpStateStats --section MemoryWorkloadAnalysis -k "regex:${KERNELS:-paged_attention|add_rms_norm|attention_inputs|prefetch_l2|choose_tokens}" \
  --launch-skip "${SKIP:-24}" --launch-count "${COUNT:-10}" \
  "$bin/moe" bench --backend cuda --repeats 3 --random-model "$model" --batch "${BATCH:-1}" --prompt-tokens 128 \
  --decode-tokens 3 --enforce-eager > "$out/kernel_stalls.txt" 2>&1
rc=$?
grep -E '^  [a-z_]+.*\(|Duration|Stall|Warp Cycles Per Issued|Registers Per|Threads  |Block Size|Grid Size|Memory Throughput|L2 Hit' "$out/kernel_stalls.txt" | head -150
exit $rc

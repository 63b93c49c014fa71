#!/usr/bin/env bash
# Nsight Compute times every kernel of whole-model forwards (prefill, then decode steps) on random weights.
#   MODEL   a --random-model name or config.json (default: the Qwen3-30B-A3B shape cut to LAYERS layers)
#   LAYERS  layers of the default shape (default 2); BATCH (default 1); PROMPT (default 128); STEPS (default 3)
# One line per kernel in launch order ($OUT/step_kernels.csv: ncu's csv), then the kernels of the last
# decode step summed by name (step_kernels.py). Clocks are left alone (--clock-control none), caches kept.
set -uo pipefail
source scripts/device/lib/common.sh
gpu
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
model=${MODEL:-}
if [ -z "$model" ]; then
  model=/tmp/moe-step-kernels.json
  # The shape's config as random_model.py (transformers) writes it, cut to LAYERS layers.
  python3 -c 'import sys; sys.path.insert(0, "scripts/device"); import random_model
random_model.SHAPES["qwen3-30b-a3b"](int(sys.argv[2])).to_json_file(sys.argv[1])' "$model" "${LAYERS:-2}"
fi
args="bench --backend cuda --repeats 3 --random-model $model --batch ${BATCH:-1} --prompt-tokens ${PROMPT:-128} --decode-tokens ${STEPS:-3} ${EAGER---enforce-eager}"
timeout 400 "$ncu" --clock-control none --cache-control none --print-units base --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum \
  --log-file "$out/step_kernels.csv" "$bin/moe" $args > "$out/step_kernels.out" 2>&1
rc=$?
tail -5 "$out/step_kernels.out"
python3 scripts/device/step_kernels.py "$out/step_kernels.csv" > "$out/step_kernels.table" || rc=1
cat "$out/step_kernels.table"
cat "$out/step_kernels.table" >> "$SUMMARY"
exit $rc

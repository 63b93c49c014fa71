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
  python3 - "$model" "${LAYERS:-2}" <<'PY'
import json, sys
shape = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
         "num_hidden_layers": int(sys.argv[2]), "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
         "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1,
         "mlp_only_layers": [], "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
         "rope_theta": 1000000.0, "rope_scaling": None, "attention_bias": False, "use_sliding_window": False,
         "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151645}
json.dump(shape, open(sys.argv[1], "w"))
PY
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

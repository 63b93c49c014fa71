#!/usr/bin/env bash
# `moe generate --ep --backend cuda` on the model fixtures across NP GPUs, against one GPU and transformers.
# Greedy, two prompts as one batch, `--backend cuda` on one GPU against `mpirun -np NP moe generate --ep
# --backend cuda` (NP: the GPUs visible; on a single-GPU kind NP = 1 still runs the NCCL path, one rank).
# The table (generate_ep_table.py): tokens equal to one GPU and to transformers, first divergence, routing
# agreement, per-rank pairs and bytes, and the checks that must hold under bf16 rounding (exit 1 if not).
# Carry of `run.sh prepare_nccl`; `ep` runs it last. MODELS, NP, NEW_TOKENS and WIRES override the defaults;
# a wire is TRANSFER/COMBINE (--ep-transfer, --ep-combine), default "bf16/bf16 bf16/f32". Logs in $OUT.
set -uo pipefail
source scripts/device/lib/mpi.sh
CARRY=${CARRY:-${NCCL_CARRY:-.device-carry-nccl}}
source scripts/device/lib/common.sh
out=${OUT:-/tmp}
B=${NCCL_CARRY:-.device-carry-nccl}/bin
NP=${NP:-$(nvidia-smi -L | wc -l)}
MODELS=${MODELS:-"qwen3_moe deepseek_v3 deepseek_v2 qwen2_moe mixtral olmoe"}
WIRES=${WIRES:-"bf16/bf16 bf16/f32"}
NEW_TOKENS=${NEW_TOKENS:-16}
work=/tmp/nccl_generate && rm -rf $work && mkdir -p $work
echo "== moe generate --backend cuda (1 GPU) vs mpirun -np $NP moe generate --ep --backend cuda ($NP GPUs)"
for m in $MODELS; do
  dir=tests/data/models/$m
  prompts=$(python3 -c "import json; c = json.load(open('$dir/reference.json'))['cases'];
print(' '.join('--prompt-ids ' + ','.join(map(str, x['ids'])) for x in c[:2]))")
  args="generate --model $dir $prompts --max-new-tokens $NEW_TOKENS --backend cuda"
  $B/moe $args --json $work/${m}_one.json --trace-routing $work/${m}_one.jsonl > $work/${m}_one.log 2>&1 ||
    echo "$m one GPU: exit $? ($(tail -1 $work/${m}_one.log))"
  # One GPU again with the fused decode kernel off: every step through the grouped GEMMs, the kernels the
  # EP layer runs, so that only the exchange's arithmetic differs.
  MOE_DECODE_MAX_TOKENS=0 $B/moe $args --json $work/${m}_gemm.json > $work/${m}_gemm.log 2>&1 ||
    echo "$m one GPU (no decode kernel): exit $? ($(tail -1 $work/${m}_gemm.log))"
  for wire in $WIRES; do
    tag=${wire/\//-}
    $MPIRUN -np "$NP" $B/moe $args --ep --ep-transfer ${wire%/*} --ep-combine ${wire#*/} --json $work/${m}_ep_$tag.json \
      --stats $work/${m}_ep_${tag}_stats.json --trace-routing $work/${m}_ep_$tag.jsonl > $work/${m}_ep_$tag.log 2>&1 ||
      echo "$m --ep $wire: exit $? ($(grep -m1 error $work/${m}_ep_$tag.log))"
  done
done
python3 scripts/device/generate_ep_table.py $work "$NP" "$WIRES" $MODELS | tee "$out/generate_ep_np$NP.txt"
rc=${PIPESTATUS[0]}
cat "$out/generate_ep_np$NP.txt" >> "$SUMMARY"
tar czf "$out/generate_ep_np$NP.tar.gz" -C $work .
exit $rc

#!/usr/bin/env bash
# On the device: `moe generate` on the bundled transformers fixtures (tests/data/models), greedy, two prompts
# as one batch, with --backend cuda on one GPU against `mpirun -np NP moe generate --ep --backend cuda` on
# NP GPUs (NP: the GPUs visible; on a single-GPU kind NP = 1 still runs the NCCL path, one rank). Prints a
# table (generate_ep_table.py): tokens equal to one GPU and to transformers, first divergence, routing
# agreement, per-rank pairs and bytes, and the checks that must hold under bf16 rounding (exit 1 if not). Carry from scripts/device/prepare_nccl_carry.sh; nccl_ep.sh runs it
# last. MODELS, NP, NEW_TOKENS and WIRES (bf16 fp8) override the defaults. Logs in $OUT.
set -uo pipefail
source scripts/device/mpi_env.sh
out=${OUT:-/tmp}
B=${NCCL_CARRY:-.device-carry-nccl}/bin
NP=${NP:-$(nvidia-smi -L | wc -l)}
MODELS=${MODELS:-"qwen3_moe deepseek_v3 deepseek_v2 qwen2_moe mixtral olmoe"}
WIRES=${WIRES:-bf16}
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
  for wire in $WIRES; do
    $MPIRUN -np "$NP" $B/moe $args --ep --ep-transfer $wire --json $work/${m}_ep_$wire.json \
      --stats $work/${m}_ep_${wire}_stats.json --trace-routing $work/${m}_ep_$wire.jsonl > $work/${m}_ep_$wire.log 2>&1 ||
      echo "$m --ep $wire: exit $? ($(grep -m1 error $work/${m}_ep_$wire.log))"
  done
done
python3 scripts/device/generate_ep_table.py $work "$NP" "$WIRES" $MODELS | tee "$out/generate_ep_np$NP.txt"
rc=$?
tar czf "$out/generate_ep_np$NP.tar.gz" -C $work .
exit $rc

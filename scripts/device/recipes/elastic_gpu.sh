#!/usr/bin/env bash
# Elastic expert parallelism on GPUs: ep_cuda_eplb_tests at mpirun -np 1 (and 2, 4 as the GPUs allow), then moe generate.
# From the carry of `run.sh prepare` (its binaries and its OpenMPI). The tests: expert slots migrated GPU to GPU
# bit for bit, the layer rebuilt on them at a new epoch against one GPU, a rebalance under skewed routing
# lowering the served rank max/mean (2+ GPUs), a placement leaving an expert unheld refused. Then
# `moe generate --ep --backend cuda --eplb-interval-steps 2` on the qwen3_moe fixture at each rank count, against
# the same run with a fixed placement: epochs, bytes moved, the predicted max/mean before and after, whether
# the tokens agree (they may not: an epoch changes which GPU adds a token's bf16 partial sums). Last,
# tests/server/ep_server_test.py with --backend cuda at each rank count: 16 streaming clients while the
# placement rebalances, the admin endpoints, scaling at 4, refusals, outputs against one rank.
# NPS overrides the rank counts (default "1", plus 2 and 4 when nvidia-smi -L lists that many GPUs).
# Logs in $OUT; exit 1 if a test failed, a run failed, or a run on 2+ GPUs switched no epoch.
set -uo pipefail
source scripts/device/lib/common.sh
export NCCL_CARRY=$carry
source scripts/device/lib/mpi.sh
gpu
n_gpus=$(nvidia-smi -L | wc -l)
default_nps="1"
[ "$n_gpus" -ge 2 ] && default_nps="$default_nps 2"
[ "$n_gpus" -ge 4 ] && default_nps="$default_nps 4"
NPS=${NPS:-$default_nps}
status=0

note "== ep_cuda_eplb_tests ($n_gpus GPUs visible)"
for np in $NPS; do
  log="$out/eplb_tests_np$np.log"
  # NOTE: no colours: mpirun gives the ranks a terminal, and the counts below read the plain lines.
  $MPIRUN -np "$np" "$bin/ep_cuda_eplb_tests" --gtest_color=no > "$log" 2>&1
  rc=$?
  [ $rc = 0 ] || status=1
  echo "== ep_cuda_eplb_tests -np $np: exit $rc"
  grep -E '^\[  (FAILED|SKIPPED) \] [A-Z].* \(|Failure|Expected|Which is|error|max rel|served max/mean' "$log" | head -40
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  worst=$(grep -oE 'max rel [0-9.e+-]+' "$log" | awk '{ if ($3 + 0 > w) w = $3 + 0 } END { printf "%.2e", w }')
  served=$(grep -oE 'served max/mean [0-9.]+ -> [0-9.]+' "$log" | head -1)
  row "-np $np" "exit $rc" "$(gtest_counts "$log"), skipped ${skipped:-0}" "worst max rel $worst" "${served:-}"
done

note "== moe generate --ep --backend cuda --eplb-interval-steps 2 (qwen3_moe fixture) vs a fixed placement"
work=/tmp/elastic_gpu && rm -rf $work && mkdir -p $work
args="generate --model tests/data/models/qwen3_moe --backend cuda --max-new-tokens 12
  --prompt-ids 7,7,7,7,7,7,7,7,7,7,7,7 --prompt-ids 7,7,7,7,3 --prompt-ids 11,11,11"
for np in $NPS; do
  # One rank has no room for replicas (and nothing to move to): the run must simply work there.
  redundant=$([ "$np" -ge 2 ] && echo 2 || echo 0)
  # shellcheck disable=SC2086
  $MPIRUN -np "$np" "$bin/moe" $args --ep --json $work/fixed_np$np.json > $work/fixed_np$np.log 2>&1
  rc_fixed=$?
  # shellcheck disable=SC2086
  $MPIRUN -np "$np" "$bin/moe" $args --ep --eplb-interval-steps 2 --eplb-window-steps 2 --eplb-min-gain 0.01 \
    --num-redundant-experts $redundant --json $work/elastic_np$np.json --stats $work/elastic_np$np.stats.json \
    > $work/elastic_np$np.log 2>&1
  rc=$?
  [ $rc = 0 ] && [ $rc_fixed = 0 ] || { status=1; grep -m2 error $work/*_np$np.log; }
  verdict=$(python3 - "$work" "$np" <<'PY'
import json, sys
work, np = sys.argv[1], int(sys.argv[2])
def ids(f):
    return [json.loads(l)["generated_ids"] for l in open(f) if l.strip()]
def mom(v):
    return max(v) / (sum(v) / len(v)) if sum(v) > 0 else 1.0
try:
    epochs = json.load(open(f"{work}/elastic_np{np}.stats.json"))["ep"].get("epochs", [])
    same = ids(f"{work}/elastic_np{np}.json") == ids(f"{work}/fixed_np{np}.json")
except (OSError, KeyError, ValueError) as e:
    print(f"no result ({e})\tFAIL"); sys.exit(0)
moved = sum(e["bytes_moved"] for e in epochs)
worst = [(mom(l["before"]), mom(l["after"])) for e in epochs for l in e["layers"].values()]
drop = all(a < b for b, a in worst)
fmm = f"max/mean {max(b for b, _ in worst):.2f} -> {max(a for _, a in worst):.2f}" if worst else "no layer moved"
ok = (np == 1 or (epochs and moved > 0)) and drop
print(f"{len(epochs)} epochs, {moved} bytes moved\t{fmm}\ttokens {'equal' if same else 'differ'} to the fixed run\t{'ok' if ok else 'FAIL'}")
PY
)
  case "$verdict" in *FAIL) status=1 ;; esac
  echo "-np $np: exit $rc: $verdict"
  row "generate -np $np" "exit $rc" "$verdict"
done
note "== mpirun -np N moe serve --enable-expert-parallel --backend cuda (tests/server/ep_server_test.py, qwen3_moe fixture)"
for np in $NPS; do
  log="$out/ep_server_cuda_np$np.log"
  python3 tests/server/ep_server_test.py "$bin/moe" "$M/usr/bin/mpirun" tests/data/models/qwen3_moe "$np" cuda \
    > "$log" 2>&1
  rc=$?
  [ $rc = 0 ] || { status=1; grep -m8 -E 'FAIL|Error|error' "$log"; }
  result=$(grep -oE 'ep server tests .*' "$log" | tail -1)
  echo "-np $np: exit $rc: ${result:-no result}"
  row "serve -np $np" "exit $rc" "${result:-no result}"
done
tar czf "$out/elastic_gpu.tgz" -C $work .
exit $status

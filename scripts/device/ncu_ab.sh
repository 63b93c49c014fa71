#!/usr/bin/env bash
# On the device: the kernels of one forward under ncu (time, DRAM bytes, SM clock, tensor-pipe and L2 use)
# for each (point, setting), to compare environment overrides of one carried build kernel by kernel.
# Usage: POINTS="shape:T[:VAR=v;VAR=v] ..." [LAUNCHES=kernels of the forward, 12] [ROUTING=balanced|zipf] bash scripts/device/ncu_ab.sh
# (a table per point; the logs in $OUT/ncu_ab.tgz, or /tmp without $OUT).
set -uo pipefail
source scripts/device/carry_env.sh
work=/tmp/ncu_ab && rm -rf "$work" && mkdir -p "$work"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum
i=0
for point in ${POINTS:?}; do
  IFS=: read -r shape T settings <<< "$point"
  i=$((i + 1))
  # The bench's first 13 launches are the cuBLAS matmul ceiling; then the first forwards' kernels.
  env ${settings//;/ } timeout 300 ncu --clock-control none --print-units base --csv --metrics "$metrics" \
    --launch-skip 13 --launch-count "${LAUNCHES:-12}" --log-file "$work/$i.csv" "$bin/moe" bench --backend cuda \
    --shape "$shape" --tokens "$T" --repeats 3 --routing "${ROUTING:-balanced}" > "$work/$i.out" 2>&1
  echo "== $shape T=$T ${settings:-default} (rc $?)"
  python3 scripts/device/ncu_table.py "$work/$i.csv"
done
tar czf "$out/ncu_ab.tgz" -C "$work" .

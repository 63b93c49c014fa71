#!/usr/bin/env bash
# Nsight Compute on the kernels of one forward, per point: MODE kernels, sections, l2 or bmm.
#   kernels   every kernel of the forward: time, DRAM bytes, SM clock, tensor pipe, L2 sectors (ncu_table.py);
#             LAUNCHES kernels of the forward (default 12); KERNELS (an ncu -k filter on mangled names, e.g.
#             'regex:quantize_rows_fp8|Lb1EEEvPK13__nv_bfloat16': the fp8 layer's) picks them instead of the first forward's
#   sections  the grouped GEMMs' speed-of-light, memory-workload, launch and occupancy sections; KERNELS (an
#             ncu -k filter) and COUNT (kernels a point, default 2)
#   l2        the grouped GEMMs' L2 sectors by source unit (the SMs, the other L2 partition), reads, writes, DRAM
#   bmm       our two expert GEMMs against cuBLAS's batched GEMMs (bmm_peer.py --once) on the same shapes at
#             exactly balanced routing, under the same metrics
# A point is shape:T[:VAR=value;VAR=value] (settings: environment overrides of the carried build; not for bmm).
# Clocks are left alone (--clock-control none). ROUTING=balanced|zipf; BENCH_ARGS more bench options (e.g.
# '--cuda-weights fp8'). Full reports in $OUT/ncu_MODE.tgz.
# Usage: ncu MODE "shape:T ..."
set -uo pipefail
source scripts/device/lib/common.sh
mode=${1:?usage: ncu kernels|sections|l2|bmm \"shape:T ...\"}
points=${2:?usage: ncu MODE \"shape:T ...\"}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
work=/tmp/moe-ncu-$mode && rm -rf "$work" && mkdir -p "$work"
bench() { echo "$bin/moe bench --backend cuda --shape $1 --tokens $2 --repeats 3 --routing ${ROUTING:-balanced} ${BENCH_ARGS:-}"; }
# ncu's per-kernel sections, one line per metric, kernel names cut at their parameter lists.
compact() { grep -E "^  [a-zA-Z_].*\(|gpu__|sm__|lts__|dram__|launch__" | sed -E 's/\(.*//; s/ +/ /g' | cut -c1-110; }
i=0
for point in $points; do
  IFS=: read -r shape T settings <<< "$point"
  i=$((i + 1))
  echo "== $mode $shape T=$T ${settings:-default}"
  case $mode in
    kernels)
      metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum
      # NOTE: the bench's first 13 launches are the cuBLAS matmul ceiling; then the first forwards' kernels.
      pick=(--launch-skip 13)
      [ -n "${KERNELS:-}" ] && pick=(-k "$KERNELS" --kernel-name-base mangled)
      env ${settings//;/ } timeout 300 "$ncu" --clock-control none --print-units base --csv --metrics "$metrics" \
        "${pick[@]}" --launch-count "${LAUNCHES:-12}" --log-file "$work/$i.csv" $(bench "$shape" "$T") > "$work/$i.out" 2>&1
      python3 scripts/device/ncu_table.py "$work/$i.csv" > "$work/$i.table" ;;
    sections)
      env ${settings//;/ } timeout 300 "$ncu" --clock-control none -k "${KERNELS:-regex:grouped_gemm}" -c "${COUNT:-2}" \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
        --section LaunchStats --section Occupancy $(bench "$shape" "$T") > "$work/$i.txt" 2>&1
      grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|L1/TEX Hit|Mem Busy|Max Bandwidth|L2 Cache Throughput|SM Frequency|DRAM Frequency|Block Size|Registers Per|Theoretical Occupancy|Achieved Occupancy|Waves Per SM|Grid Size" \
        "$work/$i.txt" | sed -E 's/\(.*\)//; s/ +/ /g' | head -60 > "$work/$i.table" ;;
    l2)
      units=$("$ncu" --query-metrics 2>/dev/null | grep -oE "^lts__t_(sectors|requests)_srcunit_[a-z]+" | grep -v "_l$" | sort -u)
      metrics=$(echo "$units" | sed 's/$/.sum/' | tr '\n' ',')lts__t_sectors.sum,dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum
      env ${settings//;/ } timeout 250 "$ncu" --clock-control none -k regex:grouped_gemm -c 2 --metrics "$metrics" \
        $(bench "$shape" "$T") > "$work/$i.txt" 2>&1
      grep -E "grouped_gemm|lts__|dram__|gpu__time" "$work/$i.txt" | sed -E 's/ +/ /g' | cut -c1-120 > "$work/$i.table" ;;
    bmm)
      metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__cluster_dim_x
      timeout 280 "$ncu" --clock-control none -k "regex:grouped_gemm" -c 2 --metrics "$metrics" \
        $(bench "$shape" "$T") > "$work/${i}_moe.log" 2>&1
      { echo "-- ours (gate/up, then down)"; compact < "$work/${i}_moe.log"; } > "$work/$i.table"
      timeout 280 "$ncu" --clock-control none -k "regex:nvjet|gemm|cutlass|xmma" -c 2 --metrics "$metrics" \
        python3 scripts/device/bmm_peer.py "$shape:$T" --once > "$work/${i}_bmm.log" 2>&1
      { echo "-- cuBLAS bmm (gate/up, then down)"; compact < "$work/${i}_bmm.log"; } >> "$work/$i.table" ;;
    *) echo "unknown mode: $mode (kernels, sections, l2, bmm)"; exit 2 ;;
  esac
  cat "$work/$i.table"
  note "== $mode $shape T=$T ${settings:-default}"
  cat "$work/$i.table" >> "$SUMMARY"
done
tar czf "$out/ncu_$mode.tgz" -C "$work" .

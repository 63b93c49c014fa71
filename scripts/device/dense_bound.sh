#!/usr/bin/env bash
# On the device, one call: our layer (`moe bench --backend cuda`, balanced routing) and cuBLAS's batched GEMM on
# the layer's two expert GEMMs at exactly balanced routing (bmm_peer.py: the best case for a dense library), with
# the SM clock and board power sampled every 100 ms (nvidia-smi) so that each run's clock and power can be read.
# Needs .device-carry/ (prepare_carry.sh). Usage: [POINTS="shape:T ..."] bash scripts/device/dense_bound.sh
set -uo pipefail
source scripts/device/carry_env.sh
points=${POINTS:-deepseek-v3:8192 deepseek-v3:1024 qwen3-30b-a3b:8192 qwen3-30b-a3b:2048 qwen3-30b-a3b:1024 mixtral-8x7b:8192 mixtral-8x7b:1024}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 > "$out/smi.csv" &
smi=$!
stamp() { echo "$(date +%H:%M:%S.%N | cut -c1-12) $*" >> "$out/phases.txt"; }
for point in $points; do
  stamp "moe $point"
  $bin/moe bench --backend cuda --shape ${point%%:*} --tokens ${point#*:} --repeats 20 2>&1 | tee -a "$out/moe.txt" | grep -E "^ *[0-9]|x floor|floor" | tail -2
done
stamp "bmm"
python3 scripts/device/bmm_peer.py "$(echo $points | tr ' ' ',')" 2>&1 | tee "$out/bmm.jsonl"
stamp "end"
kill $smi
# The clock and power while each phase ran (median of the samples).
python3 - "$out" <<'PY'
import sys, statistics, datetime
out = sys.argv[1]
ph = [l.split(" ", 1) for l in open(f"{out}/phases.txt").read().split("\n") if l]
smi = []
for l in open(f"{out}/smi.csv"):
    f = [x.strip() for x in l.split(",")]
    try: smi.append((f[0].split(" ")[1][:12], float(f[1].split()[0]), float(f[2].split()[0])))
    except Exception: pass
for (t0, what), (t1, _) in zip(ph, ph[1:]):
    s = [(c, p) for t, c, p in smi if t0 <= t < t1 and p > 150]
    if s: print(f"{what:30s} busy samples {len(s):4d}  SM clock median {statistics.median(c for c,_ in s):6.0f} MHz  power median {statistics.median(p for _,p in s):5.0f} W  max {max(p for _,p in s):5.0f} W")
PY

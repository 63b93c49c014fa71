#!/usr/bin/env bash
# The layer against cuBLAS's batched GEMMs on its two expert GEMMs at exactly balanced routing (bmm_peer.py).
# Our layer (`moe bench --backend cuda`, balanced routing) first, then torch.bmm on the same shapes with T*k/E
# rows for every expert: the best case a dense library gets. The SM clock and board power are sampled every
# 100 ms (nvidia-smi) so that each phase's clock and power can be read.
# Usage: [POINTS="shape:T ..."] dense_bound
set -uo pipefail
source scripts/device/lib/common.sh
points=${POINTS:-deepseek-v3:8192 deepseek-v3:1024 qwen3-30b-a3b:8192 qwen3-30b-a3b:2048 qwen3-30b-a3b:1024 mixtral-8x7b:8192 mixtral-8x7b:1024}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 > "$out/smi.csv" &
smi=$!
stamp() { echo "$(date +%H:%M:%S.%N | cut -c1-12) $*" >> "$out/phases.txt"; }
for point in $points; do
  stamp "moe $point"
  $bin/moe bench --backend cuda --shape ${point%%:*} --tokens ${point#*:} --repeats 20 --json "$out/moe.json" 2>&1 |
    tee -a "$out/moe.txt" | grep -E "^ *[0-9]|x floor|floor" | tail -2
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[0]; print('moe', r['shape'], r['tokens'], round(r['us_median'],1), round(r['ratio_to_floor'],2), sep='\t')" \
    "$out/moe.json" >> "$SUMMARY"
done
stamp "bmm"
python3 scripts/device/bmm_peer.py "$(echo $points | tr ' ' ',')" 2>&1 | tee "$out/bmm.jsonl"
python3 - "$out/bmm.jsonl" >> "$SUMMARY" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{") and '"shape"' in line:
        r = json.loads(line)
        print("\t".join(["bmm", r["shape"], str(r["tokens"]), f'{r["bmm_both_us"]:.1f}', f'gate/up {r["bmm_gate_up_us"]:.1f}, down {r["bmm_down_us"]:.1f}']))
PY
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

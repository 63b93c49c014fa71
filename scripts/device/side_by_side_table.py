"""Joins moe bench JSON files and the torch peers' JSON lines from a folder into one markdown table."""
import glob
import json
import os
import sys

folder = sys.argv[1]
ours = {}
for path in glob.glob(os.path.join(folder, "moe_*.json")):
    for row in json.load(open(path)):
        ours[(row["shape"], row["tokens"], row["routing"])] = row
peers = {}
for path in glob.glob(os.path.join(folder, "torch_*.jsonl")):
    for line in open(path):
        if line.strip():
            row = json.loads(line)
            peers[(row["shape"], row["tokens"], row["routing"])] = row
print("| shape | T | routing | moe us | x floor | TFLOP/s | TB/s | floor us | torch loop us | torch _grouped_mm us | moe speed-up vs best torch |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for key in sorted(ours, key=lambda k: (k[0], k[2], k[1])):
    r, p = ours[key], peers.get(key, {})
    loop, grouped = p.get("torch_loop_us"), p.get("torch_grouped_mm_us")
    best = min([v for v in (loop, grouped) if v is not None], default=None)
    fmt = lambda v: f"{v:,.1f}" if isinstance(v, (int, float)) else "n/a"
    print(f"| {key[0]} | {key[1]} | {key[2]} | {r['us_median']:,.1f} | {r['ratio_to_floor']:.2f} | {r['tflops']:.1f} | "
          f"{r['weight_tbps']:.2f} | {r['floor_us']:,.1f} | {fmt(loop)} | {fmt(grouped)} | "
          f"{(best / r['us_median']) if best else float('nan'):.2f}x |")
if ours:
    any_row = next(iter(ours.values()))
    print(f"\nceilings measured in the run: bf16 matmul {any_row['matmul_tflops']:.0f} TFLOP/s, copy {any_row['copy_tbps']:.2f} TB/s")

#!/usr/bin/env python3
"""On the device: measure the routed experts' grouped-GEMM choices per layer shape and token bucket with
`moe bench --backend cuda`, and write the rows of src/cuda/tuned_tiles.inc (tile shapes autotuned offline, the
table committed, the policy as the default for unseen shapes).

The choices are read from the environment once per process, so each candidate is its own `moe bench` run over
all the token counts it applies to: mma.sync tiles of 16, 32, 48 or 64 rows (MOE_GROUPED_GEMM=mma,
MOE_TILE_ROWS), the wgmma kernel (MOE_TILE_ROWS=128) with the staged epilogue on or off for each of the two
GEMMs (MOE_WGMMA_STAGED_EPILOGUE=<gate/up>,<down>), and the policy (MOE_TUNED_TILES=off). Two phases:
1. Screen: candidates alternate within each round; a point's time is the lowest of its rounds' medians; the
   best candidate goes on where it beats the policy by more than --margin in every round.
2. Confirm: the same processes differ in more than the choice (which other token counts they run, hence
   the workspace and the GPU's state): on the H200 the policy and its own choice under another name measured
   up to 18% apart at DeepSeek-V3 T=512. So each screened point runs again as a pair of one-point processes,
   the candidate and the policy alternated for --rounds rounds, and enters the table only where the
   candidate wins every round by more than --confirm-margin. Elsewhere the layer keeps the policy.
   The table, like the policy, cannot see how skewed a batch's routing is (the counts are on the device), and
   a choice that wins with balanced routing can lose badly with skewed routing (the 48-row tiles: +34% at
   DeepSeek-V3 T=1024 with Zipf routing, measured on the H200 on 2026-12-01). So each confirming round also runs
   both with --routing zipf, and the candidate is kept only if it is not slower there by more than
   --confirm-margin in any round.
Writes to --out: tuned_tiles.inc (the table rows of these shapes, to merge into src/cuda/tuned_tiles.inc),
autotune_table.md (every candidate's time at every point) and raw.jsonl (one line per bench row).
Usage: python3 scripts/device/autotune_tiles.py --moe .device-carry/bin/moe --shapes qwen3-30b-a3b,mixtral-8x7b \
         [--tokens 4,8,...,8192] [--rounds 2] [--repeats 15] [--margin 0.01] --out "$OUT"
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

# name -> (environment, applies(rows per expert)); rows per expert = T * k / E.
CANDIDATES = {
    "policy": ({"MOE_TUNED_TILES": "off"}, lambda r: True),
    "mma16": ({"MOE_GROUPED_GEMM": "mma", "MOE_TILE_ROWS": "16"}, lambda r: r <= 16),
    "mma32": ({"MOE_GROUPED_GEMM": "mma", "MOE_TILE_ROWS": "32"}, lambda r: r <= 64),
    "mma48": ({"MOE_GROUPED_GEMM": "mma", "MOE_TILE_ROWS": "48"}, lambda r: r <= 96),
    "mma64": ({"MOE_GROUPED_GEMM": "mma", "MOE_TILE_ROWS": "64"}, lambda r: r <= 256),
}
for up in ("on", "off"):
    for down in ("on", "off"):
        CANDIDATES[f"wgmma-{up}-{down}"] = (
            {"MOE_TILE_ROWS": "128", "MOE_WGMMA_STAGED_EPILOGUE": f"{up},{down}"}, lambda r: r >= 2)

SHAPE_TOP_K = {"qwen3-30b-a3b": (128, 8), "deepseek-v3": (256, 8), "mixtral-8x7b": (8, 2), "olmoe-1b-7b": (64, 8)}


def table_row(name):
    """The tuned_tiles.inc fields of a candidate: tile_rows, staged gate/up, staged down."""
    if name.startswith("mma"):
        return int(name[3:]), -1, -1
    _, up, down = name.split("-")
    return 128, int(up == "on"), int(down == "on")


def run(moe, shape, tokens, env, repeats, routing="balanced"):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [moe, "bench", "--backend", "cuda", "--shape", shape, "--tokens", ",".join(map(str, tokens)),
               "--repeats", str(repeats), "--routing", routing, "--json", f.name]
        proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            print(f"{shape} {env}: rc {proc.returncode}: {proc.stderr.strip()[-300:]}", file=sys.stderr)
            return []
        return json.load(open(f.name))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--moe", required=True)
    p.add_argument("--shapes", required=True)
    p.add_argument("--tokens", default="4,8,16,32,64,128,256,512,1024,2048,4096,8192")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--margin", type=float, default=0.02)  # screening
    p.add_argument("--confirm-margin", type=float, default=0.01)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    tokens = [int(t) for t in a.tokens.split(",")]
    os.makedirs(a.out, exist_ok=True)
    best = {}  # (shape, T, candidate) -> lowest median us
    worst = {}  # (shape, T, candidate) -> highest median us
    meta = {}  # shape -> bench row (H, I, E)
    with open(os.path.join(a.out, "raw.jsonl"), "w") as raw:
        for rnd in range(a.rounds):
            for shape in a.shapes.split(","):
                n_experts, top_k = SHAPE_TOP_K[shape]
                for name, (env, applies) in CANDIDATES.items():
                    ts = [t for t in tokens if applies(t * top_k / n_experts)]
                    for row in run(a.moe, shape, ts, env, a.repeats) if ts else []:
                        raw.write(json.dumps({"round": rnd, "candidate": name, **row}) + "\n")
                        meta[shape] = row
                        key = (shape, row["tokens"], name)
                        best[key] = min(best.get(key, math.inf), row["us_median"])
                        worst[key] = max(worst.get(key, 0.0), row["us_median"])
    table = ["| shape | T | policy us | best | best us | " + " | ".join(CANDIDATES) + " |",
             "|---|---:|---:|---|---:|" + "---:|" * len(CANDIDATES)]
    screened = []  # (shape, T, candidate)
    for shape in a.shapes.split(","):
        for t in tokens:
            times = {n: best[(shape, t, n)] for n in CANDIDATES if (shape, t, n) in best}
            if "policy" not in times:
                continue
            name = min((n for n in times if n != "policy"), key=times.get, default="policy")
            cells = " | ".join(f"{times[n]:.1f}" if n in times else "" for n in CANDIDATES)
            table.append(f"| {shape} | {t} | {times['policy']:.1f} | {name} | {times.get(name, math.nan):.1f} | {cells} |")
            if (name != "policy" and times[name] < times["policy"] * (1 - a.margin) and
                    worst[(shape, t, name)] < times["policy"]):
                screened.append((shape, t, name))
    lines, confirm = [], ["", "| shape | T | candidate | candidate us by round | policy us by round | "
                              "zipf: candidate / policy us by round | kept |", "|---|---:|---|---|---|---|---|"]
    for shape, t, name in screened:
        pairs, skewed = [], []
        for _ in range(a.rounds):
            for routing, into in (("balanced", pairs), ("zipf", skewed)):
                cand = run(a.moe, shape, [t], CANDIDATES[name][0], a.repeats, routing)
                pol = run(a.moe, shape, [t], CANDIDATES["policy"][0], a.repeats, routing)
                if cand and pol:
                    into.append((cand[0]["us_median"], pol[0]["us_median"]))
        kept = (len(pairs) == a.rounds and all(c < p * (1 - a.confirm_margin) for c, p in pairs) and
                len(skewed) == a.rounds and all(c <= p * (1 + a.confirm_margin) for c, p in skewed))
        confirm.append(f"| {shape} | {t} | {name} | {', '.join(f'{c:.1f}' for c, _ in pairs)} | "
                       f"{', '.join(f'{p:.1f}' for _, p in pairs)} | "
                       f"{', '.join(f'{c:.1f} / {p:.1f}' for c, p in skewed)} | {'yes' if kept else 'no'} |")
        if kept:
            m = meta[shape]
            tile_rows, up, down = table_row(name)
            c = max(c for c, _ in pairs)
            p = min(p for _, p in pairs)
            lines.append(f"{{{m['E']}, {m['I']}, {m['H']}, {int(math.log2(t))}, {tile_rows}, {up}, {down}}},"
                         f"  // {shape} T={t}: {name}, at most {c:.1f} us against the policy's {p:.1f} or more")
    table += confirm
    open(os.path.join(a.out, "tuned_tiles.inc"), "w").write("\n".join(lines) + "\n")
    open(os.path.join(a.out, "autotune_table.md"), "w").write("\n".join(table) + "\n")
    print("\n".join(table))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

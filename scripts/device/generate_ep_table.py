#!/usr/bin/env python3
"""The table of the generate_ep recipe (scripts/device/recipes/generate_ep.sh): for each fixture and wire format, whether
`mpirun -np NP moe generate --ep --backend cuda` produced the tokens of the one-GPU run and of transformers
(reference.json), where they first diverge, how many (token, layer) routing decisions agree, and each
rank's (token, expert) pairs and bytes sent. "vs gemm": against one GPU with the fused decode kernel off
(MOE_DECODE_MAX_TOKENS=0), whose decode steps run the grouped GEMMs as the EP layer does.

With the bf16 combine wire the GPU EP layer returns partial sums as bf16 where the single-GPU layer keeps
fp32, so on these tiny random-weight models greedy tokens may part after a few steps; with the f32 wire only
the order of fp32 additions differs. What must hold (column "check", exit 1
otherwise): the ranks' pairs add up to tokens * k in every layer, the first MoE layer picks the same experts
as one GPU for every prompt token (its input does not depend on any MoE block), the later layers for at
least 90% of them, the first generated token of each prompt is the one-GPU run's, and with the f32 combine
wire every generated token is the one of the one-GPU run without the decode kernel (only the order of fp32
additions differs between them).

  generate_ep_table.py WORK NP "WIRES" MODEL...     (a wire: TRANSFER/COMBINE, its files tagged TRANSFER-COMBINE)
"""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def routing(path):
    """(seq, pos, layer) -> experts, from a --trace-routing file."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                j = json.loads(line)
                out[(j["seq"], j["pos"], j["layer"])] = tuple(j["experts"])
    except OSError:
        pass
    return out


def checks(one, ep, r_one, r_ep, prompt_lens, stats, f32_combine, gemm):
    """'ok', or what failed."""
    failed = []
    for layer, ranks in stats["ep"]["layers"].items():
        if sum(r["pairs_served"] for r in ranks) != stats["layers"][layer]["n_tokens"] * stats["top_k"]:
            failed.append(f"pairs of layer {layer}")
    first_layer = min(layer for _, _, layer in r_one)
    prompt = [key for key in r_one if key[1] < prompt_lens[key[0]]]
    first = [key for key in prompt if key[2] == first_layer]
    if any(r_ep.get(key) != r_one[key] for key in first):
        failed.append(f"routing of layer {first_layer}")
    later = [key for key in prompt if key[2] != first_layer]
    if later and sum(r_ep.get(key) == r_one[key] for key in later) < 0.9 * len(later):
        failed.append("routing of later layers")
    if [x[:1] for x in ep] != [x[:1] for x in one]:
        failed.append("first token")
    if f32_combine and not gemm:
        failed.append("the one-GPU run without the decode kernel failed")
    elif f32_combine and ep != gemm:
        failed.append("tokens of the f32 combine")
    return "ok" if not failed else "FAIL: " + ", ".join(failed)


def divergence(a, b):
    """'=' when the id lists match, else 'seq S @ i' of the first difference."""
    for s, (x, y) in enumerate(zip(a, b)):
        for i in range(max(len(x), len(y))):
            if i >= len(x) or i >= len(y) or x[i] != y[i]:
                return f"seq {s} @ {i}"
    return "="


def main():
    work, n_ranks, wires, models = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
    print(f"{'model':12} {'wire':9} {'vs 1 GPU':>10} {'vs gemm':>10} {'vs HF':>10} {'1GPU vs HF':>11} {'routing':>11} "
          f"{'check':>5}  per-rank pairs / bytes sent")
    failures = 0
    for m in models:
        ref = load(os.path.join("tests/data/models", m, "reference.json"))
        hf = [c["generated_ids"] for c in ref["cases"][:2]] if ref else []
        one = load(os.path.join(work, f"{m}_one.json"))
        one_ids = one["generated_ids"] if one else None
        gemm = load(os.path.join(work, f"{m}_gemm.json"))
        gemm_ids = gemm["generated_ids"] if gemm else []
        for wire in wires:
            tag = wire.replace("/", "-")
            ep = load(os.path.join(work, f"{m}_ep_{tag}.json"))
            stats = load(os.path.join(work, f"{m}_ep_{tag}_stats.json"))
            if not ep or not one or not stats:
                print(f"{m:12} {wire:9} {'failed':>10}  (see {m}_ep_{tag}.log / {m}_one.log)")
                failures += 1
                continue
            ids = ep["generated_ids"]
            hf_n = [h[: len(x)] for h, x in zip(hf, ids)]
            r_one = routing(os.path.join(work, f"{m}_one.jsonl"))
            r_ep = routing(os.path.join(work, f"{m}_ep_{tag}.jsonl"))
            same = sum(1 for key, e in r_ep.items() if r_one.get(key) == e)
            check = checks(one_ids, ids, r_one, r_ep, [len(c["ids"]) for c in ref["cases"][:2]], stats,
                           wire.endswith("/f32"), gemm_ids)
            per_rank = ", ".join(f"{r['pairs_served']}/{r['bytes_sent']}" for r in stats["ep"]["per_rank"])
            failures += check != "ok"
            print(f"{m:12} {wire:9} {divergence(ids, one_ids):>10} "
                  f"{divergence(ids, gemm_ids) if gemm else 'failed':>10} {divergence(ids, hf_n):>10} "
                  f"{divergence(one_ids, hf_n):>11} {same:>5}/{len(r_ep):<5} {check:>5}  {per_rank}")
    print(f"{n_ranks} rank(s); 'vs': '=' when every generated id matches, else the first difference")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""A dense-library bound for the layer's two expert GEMMs: cuBLAS's strided batched GEMM (torch.bmm) at exactly
balanced routing, R = T * k / E rows for every expert. It is the best case a dense library gets on the MoE
problem (no router, no gather, no combine, every expert the same size), so it bounds what a grouped GEMM
built from cuBLAS could reach. Weights are [E, 2I, H] and [E, H, I] as in our layer, used transposed.
Also times cuBLAS's dense 8192^3 matmul (the floor's matmul rate) in the same process.
Usage: python3 bmm_peer.py shape:T[,shape:T...] [--once]; prints a JSON row per point. --once (for profilers):
no matmul, each GEMM run once."""
import json
import sys

import torch

from torch_moe_peers import median_us  # the peers' CUDA-event timer (same folder)

SHAPES = {  # H, I, E, k
    "qwen3-30b-a3b": (2048, 768, 128, 8),
    "deepseek-v3": (7168, 2048, 256, 8),
    "mixtral-8x7b": (4096, 14336, 8, 2),
    "olmoe-1b-7b": (2048, 1024, 64, 8),
}


def main():
    torch.manual_seed(0)
    dev = "cuda"
    once = "--once" in sys.argv[2:]
    if not once:
        n = 8192
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        matmul_us = median_us(lambda r: a @ b, 20)
        print(json.dumps({"matmul_8192_tflops": round(2 * n**3 / matmul_us / 1e6, 1)}), flush=True)
        del a, b
    for point in sys.argv[1].split(","):
        name, T = point.split(":")
        T = int(T)
        H, I, E, k = SHAPES[name]
        R = T * k // E
        if R * E != T * k:
            raise SystemExit(f"{point}: T*k = {T * k} is not a multiple of E = {E} (balanced rows per expert)")
        w13 = torch.randn(E, 2 * I, H, device=dev, dtype=torch.bfloat16) / H**0.5
        w2 = torch.randn(E, H, I, device=dev, dtype=torch.bfloat16) / I**0.5
        x = torch.randn(E, R, H, device=dev, dtype=torch.bfloat16)
        act = torch.randn(E, R, I, device=dev, dtype=torch.bfloat16)
        reps, warmups = (1, 0) if once else (10 if R * E * H * I > 2e11 else 30, 2)
        gate_up_us = median_us(lambda r: torch.bmm(x, w13.transpose(1, 2)), reps, warmups)
        down_us = median_us(lambda r: torch.bmm(act, w2.transpose(1, 2)), reps, warmups)
        flops = 2 * E * R * (2 * I * H + H * I)
        print(json.dumps({"shape": name, "tokens": T, "rows_per_expert": R, "bmm_gate_up_us": round(gate_up_us, 1),
                          "bmm_down_us": round(down_us, 1), "bmm_both_us": round(gate_up_us + down_us, 1),
                          "bmm_tflops": round(flops / (gate_up_us + down_us) / 1e6, 1)}), flush=True)
        del w13, w2, x, act
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

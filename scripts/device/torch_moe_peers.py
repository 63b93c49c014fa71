"""Peers for `moe bench --backend cuda`, timed on the same shapes, routing and token counts:
(a) a plain PyTorch loop over experts, as HuggingFace's eager path does, and
(b) torch._grouped_mm over expert-sorted tokens.
Both include the router (fp32 gate GEMM, the family's top-k) and the weighted combine, like our layer.
Prints one JSON row per (shape, tokens) to stdout."""
import json
import math
import sys

import torch

SHAPES = {
    "qwen3-30b-a3b": (2048, 768, 128, 8, "softmax_norm"),
    "deepseek-v3": (7168, 2048, 256, 8, "noaux_tc"),
    "mixtral-8x7b": (4096, 14336, 8, 2, "softmax_norm"),
    "olmoe-1b-7b": (2048, 1024, 64, 8, "softmax"),
}


def route(x, gate, bias, k, method):
    logits = x.float() @ gate.t()
    if method == "noaux_tc":
        s = logits.sigmoid()
        choice = s + bias
        E = choice.shape[1]
        g = choice.view(-1, 8, E // 8).topk(2, dim=-1)[0].sum(-1)
        keep = torch.zeros_like(g).scatter_(1, g.topk(4, dim=-1)[1], 1.0)
        mask = keep.unsqueeze(-1).expand(-1, 8, E // 8).reshape(-1, E)
        ids = choice.masked_fill(mask == 0, float("-inf")).topk(k, dim=-1)[1]
        w = s.gather(1, ids)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * 2.5
        return ids, w
    p = logits.softmax(-1)
    w, ids = p.topk(k, dim=-1)
    if method == "softmax_norm":
        w = w / w.sum(-1, keepdim=True)
    return ids, w


def loop_layer(x, gate, bias, w13, w2, k, method):
    ids, w = route(x, gate, bias, k, method)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    I = w2.shape[2]
    hit = torch.bincount(ids.flatten(), minlength=w13.shape[0]).nonzero().flatten().tolist()
    for e in hit:
        tok, slot = torch.where(ids == e)
        h = x[tok] @ w13[e].t()
        a = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
        y = a @ w2[e].t()
        out.index_add_(0, tok, (y.float() * w[tok, slot, None]))
    return out


def grouped_layer(x, gate, bias, w13t, w2t, k, method):
    ids, w = route(x, gate, bias, k, method)
    T = x.shape[0]
    flat = ids.flatten()
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=w13t.shape[0])
    offs = counts.cumsum(0).to(torch.int32)
    rows = x[order // k]
    h = torch._grouped_mm(rows, w13t, offs=offs)
    I = w2t.shape[1]
    a = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
    y = torch._grouped_mm(a, w2t, offs=offs)
    weighted = y.float() * w.flatten()[order, None]
    out = torch.zeros((T, x.shape[1]), dtype=torch.float32, device=x.device)
    out.index_add_(0, order // k, weighted)
    return out


def median_us(run, repeats, warmups=2):
    """Median of `repeats` timed calls run(r) (CUDA events, us), after `warmups` untimed calls."""
    for r in range(warmups):
        run(r)
    torch.cuda.synchronize()
    times = []
    for r in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run(r)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


def time_us(fn, inputs, repeats):
    return median_us(lambda r: fn(inputs[r % len(inputs)]), repeats, warmups=min(2, len(inputs)))


def main():
    shape_names = sys.argv[1].split(",")
    tokens = [int(t) for t in sys.argv[2].split(",")]
    routing = sys.argv[3]
    torch.manual_seed(0)
    dev = "cuda"
    for name in shape_names:
        H, I, E, k, method = SHAPES[name]
        w13 = torch.randn(E, 2 * I, H, device=dev, dtype=torch.bfloat16) / math.sqrt(H)
        w2 = torch.randn(E, H, I, device=dev, dtype=torch.bfloat16) / math.sqrt(I)
        w13t = w13.transpose(1, 2)  # [E, H, 2I] views for _grouped_mm (column-major B)
        w2t = w2.transpose(1, 2)
        gate = torch.randn(E, H, device=dev, dtype=torch.float32) / math.sqrt(H)
        if routing == "zipf":
            rank = (torch.arange(E, device=dev) * 37) % E
            gate[:, 0] = torch.log(1.0 / (rank.float() + 1.0))
        else:
            gate[:, 0] = 0
        bias = torch.zeros(E, device=dev)
        for T in tokens:
            inputs = []
            for i in range(4):
                x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
                x[:, 0] = 1
                inputs.append(x)
            reps = 10 if T * H * I * k > 2e11 else 30
            row = {"shape": name, "tokens": T, "routing": routing}
            row["torch_loop_us"] = time_us(lambda x: loop_layer(x, gate, bias, w13, w2, k, method), inputs, reps)
            try:
                row["torch_grouped_mm_us"] = time_us(
                    lambda x: grouped_layer(x, gate, bias, w13t, w2t, k, method), inputs, reps)
            except Exception as error:  # report, keep going
                row["torch_grouped_mm_error"] = str(error)[:200]
            print(json.dumps(row), flush=True)
        del w13, w2, w13t, w2t
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

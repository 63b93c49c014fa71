#!/usr/bin/env python3
"""transformers `generate` (greedy) on a named shape with random bf16 weights built on the GPU (from_config, the
shapes of random_model.py), beside `moe bench --random-model`: the same prompt length, batch sizes and decode
length. Prints one line per batch: prefill tok/s (a max_new_tokens=1 call) and decode tok/s (the time of
1 + DECODE new tokens less that call, over DECODE steps).
    hf_random_generate.py qwen3-30b-a3b LAYERS PROMPT DECODE BATCH[,BATCH...]"""
import sys
import time

import torch
import transformers

from random_model import SHAPES


def timed_generate(model, ids, new_tokens):
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                   do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main():
    if len(sys.argv) != 6 or sys.argv[1] not in SHAPES:
        sys.exit(__doc__)
    layers, prompt, decode = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    config = SHAPES[sys.argv[1]](layers)
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    print(f"transformers {transformers.__version__}: built {sys.argv[1]} ({layers} layers) in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    for batch in (int(b) for b in sys.argv[5].split(",")):
        ids = torch.randint(1, config.vocab_size, (batch, prompt), device="cuda")
        timed_generate(model, ids, 2)  # warm-up
        prefill = timed_generate(model, ids, 1)
        whole = timed_generate(model, ids, 1 + decode)
        step = (whole - prefill) / decode
        print(f"hf batch {batch}: prefill {batch * prompt / prefill:.0f} tok/s, decode {batch / step:.1f} tok/s "
              f"({step * 1e3:.3f} ms/step)", flush=True)


if __name__ == "__main__":
    main()

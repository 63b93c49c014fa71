#!/usr/bin/env python3
"""A random-weight checkpoint of a named shape, saved by transformers (bf16), for timing the whole model:
    random_model.py qwen3-30b-a3b LAYERS OUT_DIR
The weights are transformers' own initialisation (normal, initializer_range) built on the GPU; no tokenizer."""
import sys

import torch
import transformers

SHAPES = {
    "qwen3-30b-a3b": lambda layers: transformers.Qwen3MoeConfig(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, max_position_embeddings=40960,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
}


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in SHAPES:
        sys.exit(f"usage: random_model.py {{{','.join(SHAPES)}}} LAYERS OUT_DIR")
    config = SHAPES[sys.argv[1]](int(sys.argv[2]))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(sys.argv[3])


if __name__ == "__main__":
    main()

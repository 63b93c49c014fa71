#!/usr/bin/env python3
"""Builds the model-runner fixtures from the reference implementation (transformers), once, on the device
machine where transformers 5.x, torch and tokenizers are installed.

For each supported family it builds a tiny random-weight model from a config with that family's real
options (attention kind, routing method, shared experts, dense layers, rope scaling), saves it with
save_pretrained next to a BPE tokenizer.json of the family's kind, and records for a few prompts:
  - the token ids (tokenizers library, with and without special tokens),
  - the prefill logits of the last LOGIT_POSITIONS prompt positions (float32, computed by transformers in float32 from the
    weights as saved, so BF16/F16 checkpoints are checked too),
  - the greedy continuation of 16 tokens (model.generate, do_sample=False),
  - each MoE layer's top-k expert ids and routing weights for every prompt token.

The tokenizers are the ones scripts/make_tokenizer_fixtures.py trains with the same `tokenizers` library
(byte-level BPE with the Qwen2 split regex; the metaspace/byte-fallback BPE of Llama/Mixtral, here given
Mixtral's <s> template), copied so that the C++ tests need no Python.

Run on the device:  python3 scripts/device/make_fixtures.py OUT_DIR
Writes OUT_DIR/<family>/{config.json, generation_config.json, model*.safetensors[, index],
tokenizer.json, tokenizer_config.json, reference.json, reference.safetensors}; copy them to tests/data/models/.
"""
import json
import os
import shutil
import sys

import torch
import transformers
import tokenizers
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZERS = os.path.join(ROOT, "tests", "data", "tokenizers")
CHAT_TEMPLATES = os.path.join(ROOT, "tests", "data", "chat_templates")

PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Mixture of experts: every token picks its top-k experts, and the router weights sum them.",
    "def f(x):\n    return x * 2  # caf\u00e9 \u2014 \u00fcber",
]
NEW_TOKENS = 16
LOGIT_POSITIONS = 4  # the last prompt positions whose logits are kept (fixture size)

COMMON = dict(hidden_size=64, num_attention_heads=4, max_position_embeddings=512, rms_norm_eps=1e-6,
              hidden_act="silu", attn_implementation="eager")


def families():
    """(name, config class name, tokenizer, dtype, shard size, config kwargs)."""
    byte_level = dict(vocab_size=2048, bos_token_id=None, eos_token_id=0, pad_token_id=0)
    return [
        ("mixtral", "MixtralConfig", "llama", torch.float32, None,
         dict(COMMON, vocab_size=1536, bos_token_id=1, eos_token_id=2, num_hidden_layers=2, num_key_value_heads=2,
              intermediate_size=32, num_local_experts=8, num_experts_per_tok=2, rope_theta=1e6,
              tie_word_embeddings=False)),
        ("qwen2_moe", "Qwen2MoeConfig", "qwen2", torch.bfloat16, None,
         dict(COMMON, **byte_level, num_hidden_layers=3, num_key_value_heads=2, intermediate_size=96,
              moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=8,
              num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
              rope_theta=10000.0, tie_word_embeddings=False)),
        ("qwen3_moe", "Qwen3MoeConfig", "qwen2", torch.float32, None,
         dict(COMMON, **byte_level, num_hidden_layers=2, num_key_value_heads=2, head_dim=32,
              intermediate_size=96, moe_intermediate_size=32, num_experts=16, num_experts_per_tok=4,
              norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], rope_theta=1e6,
              tie_word_embeddings=True)),
        ("olmoe", "OlmoeConfig", "qwen2", torch.float16, None,
         dict(COMMON, **byte_level, num_hidden_layers=2, num_key_value_heads=2, intermediate_size=32,
              num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, rope_theta=10000.0,
              tie_word_embeddings=False)),
        ("deepseek_v2", "DeepseekV2Config", "qwen2", torch.float32, None,
         dict(COMMON, **byte_level, num_hidden_layers=3, num_key_value_heads=4, intermediate_size=96,
              moe_intermediate_size=32, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
              n_group=4, topk_group=2, topk_method="group_limited_greedy", routed_scaling_factor=1.5,
              norm_topk_prob=False, first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=32,
              qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16, rope_theta=10000.0,
              tie_word_embeddings=False)),
        ("deepseek_v3", "DeepseekV3Config", "qwen2", torch.bfloat16, "400KB",
         dict(COMMON, **byte_level, num_hidden_layers=3, num_key_value_heads=4, intermediate_size=96,
              moe_intermediate_size=32, n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=4,
              n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
              first_k_dense_replace=1, q_lora_rank=48, kv_lora_rank=32, qk_rope_head_dim=16,
              qk_nope_head_dim=32, v_head_dim=32, rope_theta=10000.0,
              rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                            "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
              tie_word_embeddings=False)),
    ]


def randomize(model, seed):
    """Weights that exercise every path: norms near 1 (not exactly), non-zero biases, routers with spread-out
    scores (so fp32 rounding cannot flip a top-k choice), a non-zero DeepSeek-V3 correction bias."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in model.state_dict(keep_vars=True).items():
            if not t.dtype.is_floating_point:
                continue
            shape = t.shape
            if "norm" in name:
                v = 1.0 + 0.2 * torch.randn(shape, generator=g)
            elif "e_score_correction_bias" in name:
                v = 0.5 * torch.randn(shape, generator=g)
            elif name.endswith(".gate.weight") or name.endswith("shared_expert_gate.weight"):
                v = 0.6 * torch.randn(shape, generator=g)
            elif name.endswith("bias"):
                v = 0.1 * torch.randn(shape, generator=g)
            elif "embed_tokens" in name:
                v = 1.0 * torch.randn(shape, generator=g)
            else:
                fan_in = shape[-1] if len(shape) >= 2 else 1
                v = torch.randn(shape, generator=g) / (fan_in ** 0.5)
            t.data.copy_(v.to(t.dtype))


def capture_routing(model):
    """Hooks the experts module of every MoE layer; returns a dict layer -> list of (indices, weights)."""
    records = {}
    hooks = []
    for name, module in model.named_modules():
        parts = name.split(".")
        if len(parts) < 2 or parts[-1] != "experts" or "layers" not in parts:
            continue
        if isinstance(module, torch.nn.ModuleList):
            continue
        layer = int(parts[parts.index("layers") + 1])

        def hook(mod, args, kwargs, layer=layer):
            idx = kwargs.get("top_k_index", args[1] if len(args) > 1 else None)
            w = kwargs.get("top_k_weights", args[2] if len(args) > 2 else None)
            records.setdefault(layer, []).append((idx.detach().cpu().clone(), w.detach().float().cpu().clone()))

        hooks.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    return records, hooks


def tokenizer_files(kind, dest):
    src = os.path.join(TOKENIZERS, kind, "tokenizer.json")
    tok = json.load(open(src))
    if kind == "llama":
        # Mixtral's tokenizer.json prepends <s> to every encoded text.
        tok["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        }
        tcfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                "tokenizer_class": "LlamaTokenizerFast"}
    else:
        tcfg = {"bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                "tokenizer_class": "Qwen2TokenizerFast"}
    # The family's real chat template, so that the fixtures are instruct-style models for the server.
    with open(os.path.join(CHAT_TEMPLATES, os.path.basename(dest) + ".jinja"), encoding="utf-8") as f:
        tcfg["chat_template"] = f.read()
    with open(os.path.join(dest, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(dest, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=1)
    return tokenizers.Tokenizer.from_file(os.path.join(dest, "tokenizer.json"))


def build(out, name, config_cls, tok_kind, dtype, shard, kwargs, seed):
    dest = os.path.join(out, name)
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    attn = kwargs.pop("attn_implementation")
    config = getattr(transformers, config_cls)(**kwargs)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=torch.float32)
    randomize(model, seed)
    model = model.to(dtype)
    save_kwargs = {"safe_serialization": True}
    if shard:
        save_kwargs["max_shard_size"] = shard
    model.save_pretrained(dest, **save_kwargs)
    tok = tokenizer_files(tok_kind, dest)

    # The reference is computed from the files as saved, in float32.
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(dest, dtype=torch.float32, attn_implementation=attn)
    ref_model.eval()
    records, hooks = capture_routing(ref_model)
    eos = ref_model.config.eos_token_id
    cases, tensors = [], {}
    for p, text in enumerate(PROMPTS):
        ids = tok.encode(text).ids
        ids_plain = tok.encode(text, add_special_tokens=False).ids
        records.clear()
        with torch.no_grad():
            out_logits = ref_model(torch.tensor([ids])).logits[0].float()
        routing = {}
        for layer, calls in sorted(records.items()):
            idx, w = calls[0]
            routing[str(layer)] = {"experts": idx.tolist(), "weights": w.tolist()}
        if not routing:
            raise SystemExit(f"{name}: no routing captured; experts modules: "
                             + str([n for n, _ in ref_model.named_modules() if n.endswith('experts')][:4]))
        tensors[f"logits.{p}"] = out_logits[-LOGIT_POSITIONS:].contiguous()
        for h in hooks:
            h.remove()
        with torch.no_grad():
            gen = ref_model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                     eos_token_id=eos, pad_token_id=eos if eos is not None else 0)
        records, hooks = capture_routing(ref_model)
        generated = gen[0, len(ids):].tolist()
        cases.append({"text": text, "ids": ids, "ids_no_special": ids_plain, "generated_ids": generated,
                      "generated_text": tok.decode(generated, skip_special_tokens=False),
                      "routing": routing})
    for h in hooks:
        h.remove()
    save_file(tensors, os.path.join(dest, "reference.safetensors"))
    meta = {"family": name, "logit_positions": LOGIT_POSITIONS, "saved_dtype": str(dtype).replace("torch.", ""), "max_new_tokens": NEW_TOKENS,
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                         "tokenizers": tokenizers.__version__},
            "eos_token_id": eos, "cases": cases}
    with open(os.path.join(dest, "reference.json"), "w") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
    size = sum(os.path.getsize(os.path.join(dest, f)) for f in os.listdir(dest))
    print(f"{name:12s} {size / 1024:8.0f} KiB  files={sorted(os.listdir(dest))}")
    print(f"  prompt lens={[len(c['ids']) for c in cases]} generated={[c['generated_ids'] for c in cases][:1]}")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "fixtures"
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    print("transformers", transformers.__version__, "torch", torch.__version__, "tokenizers", tokenizers.__version__)
    failures = 0
    for seed, (name, cls, tok, dtype, shard, kwargs) in enumerate(families()):
        if only and name not in only:
            continue
        try:
            build(out, name, cls, tok, dtype, shard, dict(kwargs), 1000 + seed)
        except Exception as e:  # keep going: one run should report every family's problem
            import traceback
            traceback.print_exc()
            print(f"FAILED {name}: {e}")
            failures += 1
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

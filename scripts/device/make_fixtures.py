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

The FP8 fixture (deepseek_v3_fp8, build_fp8) is a checkpoint made by transformers' own fine-grained FP8:
random weights saved in bf16, loaded with FineGrainedFP8Config(weight_block_size=(128, 128)) on the GPU
(quantised on load: F8_E4M3 weights, one float32 `*_scale_inv` per 128x128 block, quantization_config in
config.json), saved with save_pretrained; its reference is transformers' FP8 run of that directory reloaded
on the GPU (W8A8: each linear's input quantised to e4m3 per token and 128-wide group), beside transformers'
fp32 run of the same weights dequantised as the engine does (fp8 x scale rounded to bf16), which tells how
far activation quantisation alone moves logits and router scores (the tolerances the C++ test uses).

Run on the device:  python3 scripts/device/make_fixtures.py OUT_DIR [--only NAME[,NAME]]
(default: the six float families; deepseek_v3_fp8 only when named, e.g. --only deepseek_v3_fp8).
Writes OUT_DIR/<family>/{config.json, generation_config.json, model*.safetensors[, index],
tokenizer.json, tokenizer_config.json, reference.json, reference.safetensors}; copy them to tests/data/models/.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import types

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


def tokenizer_files(kind, dest, template=None):
    """`template`: the chat template's family (tests/data/chat_templates/<template>.jinja), the fixture's name
    by default."""
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
    with open(os.path.join(CHAT_TEMPLATES, (template or os.path.basename(dest)) + ".jinja"), encoding="utf-8") as f:
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


# ---- The FP8 fixture: a checkpoint quantised and run by transformers' fine-grained FP8 ----

FP8_BLOCK = (128, 128)
FP8_SAFETY = 2.0  # the tolerances recorded are this many times the deviations measured between the two runs
# The linears transformers converts to FP8Linear in a DeepSeek-V3 (every nn.Linear but lm_head; the router
# is a parameter of its own module, never converted), and the fused experts it converts to FP8Experts.
FP8_LINEARS = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "gate_proj", "up_proj",
               "down_proj")


def fp8_families():
    """(name, config class name, tokenizer, chat template, config kwargs) of the fixtures that build_fp8 saves as
    FP8 checkpoints. Every converted linear has both dims a multiple of the 128 block: transformers' quantiser
    on load tiles whole blocks, and its activation quantisation asserts that each linear's input (hidden_size,
    q_lora_rank, kv_lora_rank, heads x v_head_dim, (moe_)intermediate_size) is a multiple of 128; the outputs
    too (q_b: heads x (nope + rope) = 640, kv_a_proj_with_mqa: kv_lora_rank + qk_rope_head_dim = 384, kv_b:
    heads x (nope + v) = 384), so the rope dim is 128 here. NOTE: every input and output is 256 or more, so
    no matrix is a single block: transformers 5.17 saves a one-block matrix's scale as a scalar and then
    cannot reload its own fused experts ("Concatenate on tensors destined for ...gate_up_proj_scale_inv")."""
    byte_level = dict(vocab_size=2048, bos_token_id=None, eos_token_id=0, pad_token_id=0)
    return [
        ("deepseek_v3_fp8", "DeepseekV3Config", "qwen2", "deepseek_v3",
         dict(COMMON, **byte_level, hidden_size=256, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=4, intermediate_size=512, moe_intermediate_size=256, n_routed_experts=8,
              n_shared_experts=1, num_experts_per_tok=2, n_group=4, topk_group=2, routed_scaling_factor=2.5,
              norm_topk_prob=True, first_k_dense_replace=1, q_lora_rank=256, kv_lora_rank=256,
              qk_rope_head_dim=128, qk_nope_head_dim=32, v_head_dim=64, rope_theta=10000.0,
              rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                            "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
              tie_word_embeddings=False)),
    ]


def _cdiv(a, b):
    return (a + b - 1) // b


def _emulated_act_quant(x, group=128):
    """finegrained-fp8's dynamic activation quantisation: per row and `group` columns, s = amax / 448 and
    y = e4m3(x / s). Returns (y [..., K] F8_E4M3, s [..., K / group] F32)."""
    shape = x.shape
    xf = x.float().reshape(-1, shape[-1] // group, group)
    s = xf.abs().amax(dim=-1).clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
    y = (xf / s.unsqueeze(-1)).to(torch.float8_e4m3fn)
    return y.reshape(shape), s.reshape(*shape[:-1], shape[-1] // group)


def _emulated_matmul(A, B, As, Bs, block_size=None, output_dtype=torch.float32, **_):
    """finegrained-fp8's W8A8 matmul: C [..., N] = sum over K blocks of (A_blk @ B_blk^T) * As * Bs, in fp32."""
    K, N = A.shape[-1], B.shape[0]
    bn, bk = (N, K) if block_size is None else block_size
    a = A.reshape(-1, K).float()
    a_s = As.reshape(a.shape[0], -1).float()
    b = B.float()
    b_s = Bs.float().reshape(_cdiv(N, bn), _cdiv(K, bk))
    out = torch.zeros(a.shape[0], N, dtype=torch.float32, device=A.device)
    for j in range(_cdiv(K, bk)):
        k0, k1 = j * bk, min(K, (j + 1) * bk)
        w_s = b_s[:, j].repeat_interleave(bn)[:N]
        out += (a[:, k0:k1] @ b[:, k0:k1].t()) * a_s[:, j:j + 1] * w_s
    return out.to(output_dtype).reshape(*A.shape[:-1], N)


def _emulated_matmul_any(*args, activation_scale=None, **kwargs):
    """finegrained-fp8's matmul in either calling convention: the quantised input and its scales first (6
    arguments, or As given), or the float input, quantised here per token and block_size[1] columns."""
    if len(args) >= 6 or "As" in kwargs:
        return _emulated_matmul(*args, **kwargs)
    names = ("input", "weight", "weight_scale_inv", "block_size", "output_dtype")
    a = dict(zip(names, args), **kwargs)
    if activation_scale is not None:
        raise SystemExit("the fixture's emulation covers dynamic activation quantisation only")
    x, block = a["input"], a.get("block_size")
    q, s = _emulated_act_quant(x, block[1] if block is not None else x.shape[-1])
    return _emulated_matmul(q, a["weight"], s, a["weight_scale_inv"], block, a.get("output_dtype") or x.dtype)


def _emulated_batched(x, w, ws, block_size=None, expert_ids=None, **_):
    out = torch.empty(x.shape[0], w.shape[1], dtype=x.dtype, device=x.device)
    for e in expert_ids.unique().tolist():
        rows = expert_ids == e
        q, s = _emulated_act_quant(x[rows], block_size[1])
        out[rows] = _emulated_matmul(q, w[e], s, ws[e], block_size, x.dtype)
    return out


def _emulated_grouped(x, w, ws, tokens_per_expert=None, block_size=None, offsets=None, **_):
    ends = (offsets if offsets is not None else torch.cumsum(tokens_per_expert, 0)).tolist()
    out = torch.zeros(x.shape[0], w.shape[1], dtype=x.dtype, device=x.device)
    start = 0
    for e, end in enumerate(int(v) for v in ends):
        if end > start:
            q, s = _emulated_act_quant(x[start:end], block_size[1])
            out[start:end] = _emulated_matmul(q, w[e], s, ws[e], block_size, x.dtype)
        start = end
    return out


def pin_fp8_kernels():
    """Makes transformers' FP8 forward run the finegrained-fp8 path (dynamic per-token-group activation
    quantisation, fp32 accumulation) and returns what runs it. DeepGEMM is turned off: transformers falls back
    from it to finegrained-fp8 whenever it is missing (it is a hub download), and the fixture should not depend
    on which of the two the device has. finegrained-fp8 itself is a hub kernel in transformers 5
    (kernels-community/finegrained-fp8, hub_kernels.lazy_load_kernel); where it cannot be loaded (no network)
    a torch emulation of its four entry points is put where transformers looks for it."""
    try:
        from transformers.integrations import finegrained_fp8 as fg
    except ImportError as e:
        raise SystemExit(f"transformers.integrations.finegrained_fp8 is missing ({e}): this transformers has no "
                         "fine-grained FP8")
    if hasattr(fg, "act_quant") and hasattr(fg, "w8a8_block_fp8_matmul_triton"):
        return "transformers' in-tree Triton kernels (finegrained_fp8.act_quant, w8a8_block_fp8_matmul_triton)"

    def no_deepgemm(*args, **kwargs):
        raise ImportError("DeepGEMM is off for the fixture (make_fixtures.py pins the finegrained-fp8 path)")

    for name in ("deepgemm_fp8_fp4_linear", "deepgemm_fp8_linear"):
        if hasattr(fg, name):
            setattr(fg, name, no_deepgemm)
    if hasattr(fg, "_deepgemm_available"):
        fg._deepgemm_available = False
    try:
        from transformers.integrations import deepgemm as dg
        dg._load_deepgemm_kernel = no_deepgemm
    except ImportError:
        pass

    from transformers.integrations import hub_kernels
    entry_points = ("w8a8_fp8_matmul", "fp8_act_quant", "w8a8_fp8_matmul_batched", "w8a8_fp8_matmul_grouped")
    why = "lazy_load_kernel('finegrained-fp8') returned none"
    kernel = None
    try:
        kernel = hub_kernels.lazy_load_kernel("finegrained-fp8")
    except Exception as e:  # an unreachable hub raises whatever its client raises
        why = f"{type(e).__name__}: {e}"
    if kernel is not None and all(callable(getattr(kernel, n, None)) for n in entry_points):
        # The hub kernel against the emulation on one block-scaled product, so the log says they agree.
        try:
            g = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(8, 256, device="cuda", generator=g)
            w = (torch.randn(256, 256, device="cuda", generator=g) * 0.1).to(torch.float8_e4m3fn)
            ws = torch.rand(2, 2, device="cuda", generator=g) + 0.5
            qx, sx = kernel.fp8_act_quant(x, 128)
            got = kernel.w8a8_fp8_matmul(qx, w, sx, ws, [128, 128], torch.float32)
            qe, se = _emulated_act_quant(x, 128)
            want = _emulated_matmul(qe, w, se, ws, [128, 128], torch.float32)
            err = ((got - want).norm() / want.norm()).item()
            return f"kernels-community/finegrained-fp8 (hub kernel; its product is within {err:.1e} of the emulation)"
        except Exception as e:
            why = f"the hub kernel failed on a test product: {type(e).__name__}: {e}"
    emulation = types.ModuleType("finegrained_fp8_emulation")
    emulation.fp8_act_quant = _emulated_act_quant
    emulation.w8a8_fp8_matmul = _emulated_matmul
    emulation.w8a8_fp8_matmul_batched = _emulated_batched
    emulation.w8a8_fp8_matmul_grouped = _emulated_grouped
    getattr(hub_kernels, "_KERNEL_MODULE_MAPPING", {})["finegrained-fp8"] = emulation
    if hasattr(fg, "_triton_available"):  # transformers 5.x before the cached loader: retry, finding the emulation
        fg._triton_available = None
    # Later 5.x: a cached loader that needs the `kernels` package, called through load_finegrained_fp8_kernel
    # (5.17), whose matmul quantises its input itself: matmul(input, weight, weight_scale_inv, block_size,
    # output_dtype, activation_scale=None); earlier ones take the quantised input and its scales (6 arguments).
    loaders = [n for n in ("_load_finegrained_fp8_kernel", "load_finegrained_fp8_kernel") if hasattr(fg, n)]
    if loaders:
        fields = dict(matmul=_emulated_matmul_any, act_quant=_emulated_act_quant, batched_matmul=_emulated_batched,
                      grouped_matmul=_emulated_grouped)
        try:
            entry = fg.FineGrainedFP8(**{k: fields[k] for k in ("matmul", "batched_matmul", "grouped_matmul")})
        except Exception:
            entry = types.SimpleNamespace(**fields)
        for n in loaders:
            setattr(fg, n, lambda: entry)
    return f"a torch emulation of kernels-community/finegrained-fp8's entry points ({why})"


def fp8_parameters(model):
    """module name -> names of its F8_E4M3 parameters."""
    found = {}
    for name, module in model.named_modules():
        fp8 = [n for n, p in module.named_parameters(recurse=False) if p.dtype == torch.float8_e4m3fn]
        if fp8:
            found[name] = fp8
    return found


def check_fp8_model(model, what):
    """Every linear transformers should convert holds F8_E4M3 weights (a reload that cast them to float would
    run them unscaled), and lm_head and the routers do not."""
    found = fp8_parameters(model)
    problems = []
    for name, module in model.named_modules():
        last = name.rsplit(".", 1)[-1]
        if last in FP8_LINEARS or (last == "experts" and not isinstance(module, torch.nn.ModuleList)):
            if name not in found:
                problems.append(f"{name} ({type(module).__name__}) has no fp8 weight")
        elif name in found and (last == "lm_head" or last == "gate"):
            problems.append(f"{name} was converted")
    if problems or not found:
        raise SystemExit(f"{what}: " + ("; ".join(problems[:8]) if problems else "no fp8 parameters at all"))
    return found


def saved_tensors(dest):
    from safetensors import safe_open
    tensors = {}
    for f in sorted(os.listdir(dest)):
        if f.endswith(".safetensors") and not f.startswith("reference"):
            with safe_open(os.path.join(dest, f), framework="pt") as st:
                for k in st.keys():
                    tensors[k] = st.get_tensor(k)
    return tensors


def fp8_scale_name(tensors, name):
    """The block scales of fp8 tensor `name`, as the engine looks them up (src/quant/linear_weight.cpp)."""
    if name.endswith(".weight"):
        return name + "_scale_inv"
    return name + "_scales_inv" if name + "_scales_inv" in tensors else name + "_scale_inv"


def dequantize_like_the_engine(tensors, block):
    """The checkpoint with every F8_E4M3 tensor replaced by fp8 x its block scale rounded to bf16 (what the
    engine loads) and the scales dropped."""
    out, scales = {}, set()
    for name, t in tensors.items():
        if t.dtype != torch.float8_e4m3fn:
            continue
        s_name = fp8_scale_name(tensors, name)
        if s_name not in tensors:
            raise SystemExit(f"saved fp8 tensor {name} has no scales {s_name}; names near it: "
                             + str([k for k in tensors if k.startswith(name.rsplit('.', 1)[0])][:6]))
        n, k = t.shape[-2:]
        s = tensors[s_name].float()
        grid = list(t.shape[:-2]) + [_cdiv(n, block[0]), _cdiv(k, block[1])]
        if s.numel() == torch.Size(grid).numel():  # a one-block matrix's scale is saved as a scalar
            s = s.reshape(grid)
        if list(s.shape[-2:]) != grid[-2:]:
            raise SystemExit(f"scales {s_name} {list(s.shape)} do not tile {name} {list(t.shape)} in {block} blocks")
        full = s.repeat_interleave(block[0], dim=-2)[..., :n, :].repeat_interleave(block[1], dim=-1)[..., :k]
        out[name] = (t.float() * full).to(torch.bfloat16).contiguous()
        scales.add(s_name)
    for name, t in tensors.items():
        if t.dtype != torch.float8_e4m3fn and name not in scales:
            out[name] = t.contiguous()
    leftover = [n for n in out if "scale" in n.rsplit(".", 1)[-1]]
    if leftover:
        raise SystemExit(f"scale tensors without an fp8 weight: {leftover[:6]}")
    return out, len(scales)


def capture_router_scores(model):
    """Hooks every DeepSeek-V3 router (mlp.gate); returns a dict layer -> list of its scores for choice
    (sigmoid(h W^T) + e_score_correction_bias, fp32, [T, E]) as transformers computes them."""
    records, hooks = {}, []
    for name, module in model.named_modules():
        parts = name.split(".")
        if parts[-1] != "gate" or "layers" not in parts or not hasattr(module, "e_score_correction_bias"):
            continue
        layer = int(parts[parts.index("layers") + 1])

        def hook(mod, args, layer=layer):
            h = args[0].detach().reshape(-1, mod.weight.shape[-1]).float()
            scores = torch.sigmoid(torch.nn.functional.linear(h, mod.weight.float()))
            records.setdefault(layer, []).append((scores + mod.e_score_correction_bias.float()).cpu())

        hooks.append(module.register_forward_pre_hook(hook))
    return records, hooks


def router_margins(scores, config):
    """How far each token's expert choice is from changing, in score units: the smallest of the gap between
    the topk_group-th and the next group score (halved: a group score sums two expert scores) and the gap
    between the k-th and the next score of the experts left in the chosen groups. Returns (margins [T], the
    chosen experts [T, k]) as DeepseekV3's group-limited top-k picks them."""
    e, g, tg, k = config.n_routed_experts, config.n_group, config.topk_group, config.num_experts_per_tok
    t = scores.shape[0]
    groups = scores.view(t, g, e // g).topk(2, dim=-1)[0].sum(dim=-1)  # [T, G]
    sorted_groups = groups.sort(dim=-1, descending=True)[0]
    group_margin = (sorted_groups[:, tg - 1] - sorted_groups[:, tg]) / 2 if tg < g else torch.full((t,), float("inf"))
    mask = torch.zeros(t, g).scatter_(1, groups.topk(tg, dim=-1)[1], 1).bool()
    masked = scores.masked_fill(~mask.unsqueeze(-1).expand(t, g, e // g).reshape(t, e), 0.0)
    sorted_scores = masked.sort(dim=-1, descending=True)[0]
    return torch.minimum(group_margin, sorted_scores[:, k - 1] - sorted_scores[:, k]), masked.topk(k, dim=-1)[1]


def prefill_with_routing(model, ids, device):
    """Logits [n, V] F32 on the CPU, routing {layer: (experts [n, k], weights [n, k])}, router scores
    {layer: [n, E]} of one prompt."""
    routing, hooks = capture_routing(model)
    scores, score_hooks = capture_router_scores(model)
    try:
        with torch.no_grad():
            logits = model(torch.tensor([ids], device=device)).logits[0].float().cpu()
    finally:
        for h in hooks + score_hooks:
            h.remove()
    if not routing:
        raise SystemExit("no routing captured; experts modules: "
                         + str([n for n, _ in model.named_modules() if n.endswith("experts")][:4]))
    return logits, {l: calls[0] for l, calls in routing.items()}, {l: calls[0] for l, calls in scores.items()}


def greedy_with_logits(model, ids, device, eos):
    """model.generate's greedy continuation and each step's logits [V] F32 on the CPU."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids], device=device), max_new_tokens=NEW_TOKENS, do_sample=False,
                             eos_token_id=eos, pad_token_id=eos if eos is not None else 0, output_logits=True,
                             return_dict_in_generate=True)
    return out.sequences[0, len(ids):].tolist(), [step[0].float().cpu() for step in out.logits]


def routing_json(routing):
    return {str(l): {"experts": idx.tolist(), "weights": w.tolist()} for l, (idx, w) in sorted(routing.items())}


def build_fp8(out, name, config_cls, tok_kind, template, kwargs, seed):
    if not torch.cuda.is_available():
        raise SystemExit(f"{name}: needs a GPU (transformers quantises to FP8 and runs FP8 on CUDA only)")
    torch.backends.cuda.matmul.allow_tf32 = False  # the FP8 run's float parts (attention, lm_head, router) in fp32
    dest = os.path.join(out, name)
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    work = tempfile.mkdtemp(prefix=f"{name}-")
    bf16_dir, dequant_dir = os.path.join(work, "bf16"), os.path.join(work, "dequantized")
    try:
        attn = kwargs.pop("attn_implementation")
        config = getattr(transformers, config_cls)(**kwargs)
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=torch.float32)
        randomize(model, seed)
        model.to(torch.bfloat16).save_pretrained(bf16_dir)
        del model
        kernel = pin_fp8_kernels()
        print(f"{name}: fp8 kernel: {kernel}")

        # Quantised on load (FineGrainedFP8HfQuantizer, on CUDA only), then saved as transformers saves FP8.
        quantization = transformers.FineGrainedFP8Config(activation_scheme="dynamic", weight_block_size=FP8_BLOCK)
        quantized = transformers.AutoModelForCausalLM.from_pretrained(
            bf16_dir, quantization_config=quantization, device_map="cuda", dtype=torch.bfloat16,
            attn_implementation=attn, experts_implementation="eager")
        converted = check_fp8_model(quantized, "quantised on load")
        quantized.save_pretrained(dest)
        with open(os.path.join(dest, "config.json")) as f:
            saved_config = json.load(f)
        qc = saved_config.get("quantization_config") or {}
        if qc.get("quant_method") != "fp8" or list(qc.get("weight_block_size") or []) != list(FP8_BLOCK):
            raise SystemExit(f"{name}: config.json quantization_config is {qc}: expected quant_method fp8 with "
                             f"weight_block_size {list(FP8_BLOCK)}")
        tensors = saved_tensors(dest)
        fp8_names = sorted(n for n, t in tensors.items() if t.dtype == torch.float8_e4m3fn)
        print(f"{name}: saved {len(tensors)} tensors, {len(fp8_names)} F8_E4M3, e.g. "
              + str([(n, list(tensors[n].shape)) for n in fp8_names if ".1." in n][:6]))
        for n in ("lm_head.weight", "model.embed_tokens.weight"):
            if n in tensors and tensors[n].dtype == torch.float8_e4m3fn:
                raise SystemExit(f"{name}: {n} was saved as fp8")
        tok = tokenizer_files(tok_kind, dest, template)

        # The same weights dequantised as the engine dequantises them, as a plain bf16 checkpoint.
        dequantized, scale_count = dequantize_like_the_engine(tensors, FP8_BLOCK)
        os.makedirs(dequant_dir)
        save_file(dequantized, os.path.join(dequant_dir, "model.safetensors"), metadata={"format": "pt"})
        plain_config = {k: v for k, v in saved_config.items() if k != "quantization_config"}
        with open(os.path.join(dequant_dir, "config.json"), "w") as f:
            json.dump(plain_config, f, indent=1)
        shutil.copy(os.path.join(dest, "generation_config.json"), dequant_dir)

        # transformers' FP8 run: the saved directory reloaded on CUDA (W8A8), activations in fp32.
        fp8_model = transformers.AutoModelForCausalLM.from_pretrained(
            dest, dtype=torch.float32, device_map="cuda", attn_implementation=attn, experts_implementation="eager")
        fp8_model.eval()
        check_fp8_model(fp8_model, "reloaded")
        reloaded = fp8_model.state_dict()
        round_trip = [n for n, t in quantized.state_dict().items()
                      if (t.dtype == torch.float8_e4m3fn or "scale" in n)
                      and not (n in reloaded and torch.equal(t.cpu().view(torch.uint8) if t.dtype == torch.float8_e4m3fn
                                                             else t.float().cpu(),
                                                             reloaded[n].cpu().view(torch.uint8)
                                                             if reloaded[n].dtype == torch.float8_e4m3fn
                                                             else reloaded[n].float().cpu()))]
        if round_trip:
            raise SystemExit(f"{name}: the reloaded fp8 weights differ from the quantised ones: {round_trip[:6]}")
        del quantized, reloaded
        torch.cuda.empty_cache()
        dequant_model = transformers.AutoModelForCausalLM.from_pretrained(dequant_dir, dtype=torch.float32,
                                                                          attn_implementation=attn)
        dequant_model.eval()

        cfg = fp8_model.config
        eos = cfg.eos_token_id
        cases, tensors_out = [], {}
        logit_dev = router_dev = weight_dev = rel_err = 0.0
        recompute_mismatches = 0
        for p, text in enumerate(PROMPTS):
            ids = tok.encode(text).ids
            ids_plain = tok.encode(text, add_special_tokens=False).ids
            f_logits, f_routing, f_scores = prefill_with_routing(fp8_model, ids, "cuda")
            d_logits, d_routing, d_scores = prefill_with_routing(dequant_model, ids, "cpu")
            logit_dev = max(logit_dev, (f_logits - d_logits).abs().max().item())
            rel_err = max(rel_err, ((f_logits - d_logits).norm(dim=-1) / d_logits.norm(dim=-1)).max().item())
            margins = {}
            for layer, (idx, w) in sorted(f_routing.items()):
                m, chosen = router_margins(f_scores[layer], cfg)
                same = [set(a) == set(b) for a, b in zip(chosen.tolist(), idx.tolist())]
                recompute_mismatches += same.count(False)
                margins[str(layer)] = [mi if ok else 0.0 for mi, ok in zip(m.tolist(), same)]
                router_dev = max(router_dev, (f_scores[layer] - d_scores[layer]).abs().max().item())
                d_idx, d_w = d_routing[layer]
                for t in range(idx.shape[0]):
                    fw = dict(zip(idx[t].tolist(), w[t].tolist()))
                    dw = dict(zip(d_idx[t].tolist(), d_w[t].tolist()))
                    if fw.keys() == dw.keys():
                        weight_dev = max(weight_dev, max(abs(fw[e] - dw[e]) for e in fw))
            generated, step_logits = greedy_with_logits(fp8_model, ids, "cuda", eos)
            step_margins = [(lambda top: (top[0] - top[1]).item())(torch.topk(l, 2).values) for l in step_logits]
            if [int(torch.argmax(l)) for l in step_logits] != generated:
                raise SystemExit(f"{name}: generate's tokens are not the argmax of its logits")
            # The dequantised weights on the FP8 run's own tokens: how far activation quantisation moves each step.
            with torch.no_grad():
                forced = dequant_model(torch.tensor([ids + generated[:-1]])).logits[0].float()
            step_dev = [(forced[len(ids) - 1 + t] - step_logits[t]).abs().max().item() for t in range(len(generated))]
            logit_dev = max([logit_dev] + step_dev)
            d_generated, _ = greedy_with_logits(dequant_model, ids, "cpu", eos)
            tensors_out[f"logits.{p}"] = f_logits[-LOGIT_POSITIONS:].contiguous()
            tensors_out[f"logits_dequantized.{p}"] = d_logits[-LOGIT_POSITIONS:].contiguous()
            cases.append({"text": text, "ids": ids, "ids_no_special": ids_plain, "generated_ids": generated,
                          "generated_text": tok.decode(generated, skip_special_tokens=False),
                          "generated_margins": step_margins, "generated_deviation": step_dev,
                          "routing": routing_json(f_routing), "routing_margins": margins,
                          "dequantized": {"generated_ids": d_generated, "routing": routing_json(d_routing)}})
        save_file(tensors_out, os.path.join(dest, "reference.safetensors"))
        meta = {"family": name, "model_type": saved_config.get("model_type"),
                "reference": "transformers fine-grained fp8, cuda",
                "logit_positions": LOGIT_POSITIONS, "saved_dtype": "float8_e4m3fn (bfloat16 where not converted)",
                "max_new_tokens": NEW_TOKENS,
                "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                             "tokenizers": tokenizers.__version__},
                "eos_token_id": eos,
                "fp8": {
                    "quantization_config": qc, "kernel": kernel, "experts_implementation": "eager",
                    "activations": "float32 between the linears; each FP8 linear's input quantised to e4m3 per "
                                   "token and 128 columns (s = amax / 448)",
                    "converted_modules": len(converted), "fp8_tensors": len(fp8_names), "scales": scale_count,
                    "dequantized_reference": "transformers in float32 on the CPU, from the fp8 weights x their block "
                                             "scales rounded to bfloat16 (the engine's load): logits_dequantized.*, "
                                             "cases[].dequantized",
                    "safety": FP8_SAFETY,
                    "logit_deviation": logit_dev, "logit_tolerance": FP8_SAFETY * logit_dev,
                    "logits_rel_error": rel_err,
                    "router_score_deviation": router_dev, "router_tolerance": FP8_SAFETY * router_dev,
                    "routing_weight_deviation": weight_dev,
                    "router_recompute_mismatches": recompute_mismatches,
                    "round_trip": "the reloaded fp8 weights and scales equal the quantised ones bit for bit"},
                "cases": cases}
        with open(os.path.join(dest, "reference.json"), "w") as f:
            json.dump(meta, f, ensure_ascii=False, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    size = sum(os.path.getsize(os.path.join(dest, f)) for f in os.listdir(dest))
    print(f"{name:12s} {size / 1024:8.0f} KiB  files={sorted(os.listdir(dest))}")
    print(f"  fp8 vs dequantized: logits max |diff| {logit_dev:.3e} (normwise {rel_err:.2e}), router scores "
          f"{router_dev:.3e}, routing weights {weight_dev:.3e}; recomputed router choices off: {recompute_mismatches}")
    for c in cases:
        low = [i for i, m in enumerate(c["generated_margins"]) if m <= 2 * FP8_SAFETY * logit_dev]
        print(f"  prompt len {len(c['ids'])}: fp8 {c['generated_ids'][:8]}... dequantized "
              f"{c['dequantized']['generated_ids'][:8]}... first low-margin step {low[0] if low else None}")


def main():
    parser = argparse.ArgumentParser(description="Builds the model fixtures of tests/data/models with transformers.")
    parser.add_argument("out", nargs="?", default="fixtures", help="the folder that gets one folder per fixture")
    parser.add_argument("--only", default="", help="comma-separated fixture names to build (default: the six float "
                        "families); e.g. deepseek_v3_fp8")
    args = parser.parse_args()
    fixtures = [(name, "float", (name, cls, tok, dtype, shard, kwargs), 1000 + seed)
                for seed, (name, cls, tok, dtype, shard, kwargs) in enumerate(families())]
    fixtures += [(f[0], "fp8", f, 2000 + seed) for seed, f in enumerate(fp8_families())]
    only = [n for n in args.only.split(",") if n]
    unknown = [n for n in only if n not in [f[0] for f in fixtures]]
    if unknown:
        parser.error(f"unknown fixture {unknown}; known: {[f[0] for f in fixtures]}")
    print("transformers", transformers.__version__, "torch", torch.__version__, "tokenizers", tokenizers.__version__)
    failures = 0
    for name, kind, spec, seed in fixtures:
        if (only and name not in only) or (not only and kind != "float"):
            continue
        try:
            if kind == "float":
                build(args.out, *spec[:5], dict(spec[5]), seed)
            else:
                build_fp8(args.out, *spec[:4], dict(spec[4]), seed)
        except Exception as e:  # keep going: one run should report every family's problem
            import traceback
            traceback.print_exc()
            print(f"FAILED {name}: {e}")
            failures += 1
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

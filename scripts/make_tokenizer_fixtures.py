#!/usr/bin/env python3
"""Trains small tokenizer.json files with the HuggingFace `tokenizers` library and records, for a fixed
list of strings, the ids it gives (add_special_tokens=False) and its decode of those ids. The C++ tokenizer
tests (tests/text/tokenizer_test.cpp) read the results, so CI needs no Python.

Run from the repository root:  pip install tokenizers && python3 scripts/make_tokenizer_fixtures.py
Writes tests/data/tokenizers/<name>/{tokenizer.json,cases.json} for:
  qwen2    byte-level BPE with the Qwen2 split regex (Qwen2/Qwen3, DeepSeek-V3 and OLMoE are built alike)
  gpt2     byte-level BPE with the plain GPT-2 ByteLevel pre-tokenizer
  llama    Mixtral/Llama: metaspace normaliser, BPE with byte fallback, no pre-tokenizer
  llama_metaspace  the same vocabulary with the newer files' Metaspace pre-tokenizer (prepend_scheme first)
  metaspace_split  the same vocabulary, Metaspace pre-tokenizer splitting on "▁" and the Metaspace decoder
"""
import glob
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tokenizers")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def training_files():
    files = [os.path.join(ROOT, "README.md")]
    shared = os.path.join(ROOT, "..", "shared")
    files += [p for p in [os.path.join(shared, "DESIGN.md")] if os.path.exists(p)]
    files += sorted(glob.glob(os.path.join(shared, "seeds", "*.txt")))
    return files


CASES = [
    "",
    "Hello world",
    "Hello, world! How are you?",
    "  two leading spaces",
    "trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nrun",
    "\n",
    " ",
    "a  b   c    d",
    "numbers 12345 and 3.14159 and 1,000,000",
    "punctuation: (a), [b], {c}; \"quoted\" 'single' -- dash... ?!",
    "I'm sure they'll say it's what we'd've DON'T",
    "MoE inference: router -> experts -> combine",
    "def f(x):\n    return x * 2\n",
    "emoji 😀🎉 and ❤️",
    "专家并行的路由器",
    "混合专家模型（MoE）推理：从 Router 到 Expert Parallelism",
    "café naïve résumé Zürich",
    "Ωμέγα и кириллица",
    "한국어 텍스트",
    "日本語のテキスト",
    "<|endoftext|>",
    "before<|im_start|>user\nhi<|im_end|>after",
    "<s>[INST] hello [/INST]</s>",
    "<unk> stays whole",
    "half <|im_start tag",
    "rare bytes \u0001\u007f\u00a0 and \ufffd",
    "mixed 中文 English 123 ！？",
    "x" * 40,
    "The quick brown fox jumps over the lazy dog.",
    "▁ already has a metaspace",
]


def qwen2_tokenizer(files):
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train(files, trainer)
    return tok


def gpt2_tokenizer(files):
    specials = ["<|endoftext|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train(files, trainer)
    return tok


def llama_tokenizer(files):
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    # NOTE: the byte tokens come right after the specials, as in Llama/Mixtral (<0x00> is id 3). The
    # trainer's alphabet is limited so that rarer characters fall back to bytes.
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=specials + byte_tokens, limit_alphabet=200,
                                  show_progress=False)
    tok.train(files, trainer)
    # Specials are whole-matched tokens; the byte tokens stay in the vocab only (not added tokens).
    data = json.loads(tok.to_str())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] in specials]
    return Tokenizer.from_str(json.dumps(data))


def with_metaspace(tok, prepend_scheme, split, metaspace_decoder):
    data = json.loads(tok.to_str())
    data["normalizer"] = None
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": prepend_scheme,
                             "split": split}
    if metaspace_decoder:
        data["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": prepend_scheme,
                           "split": split}
    return Tokenizer.from_str(json.dumps(data))


def write(name, tok):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"), pretty=False)
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    cases = []
    for text in CASES:
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    with open(os.path.join(folder, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": __import__("tokenizers").__version__, "cases": cases}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    files = training_files()
    write("qwen2", qwen2_tokenizer(files))
    write("gpt2", gpt2_tokenizer(files))
    llama = llama_tokenizer(files)
    write("llama", llama)
    write("llama_metaspace", with_metaspace(llama, "first", False, metaspace_decoder=False))
    write("metaspace_split", with_metaspace(llama, "always", True, metaspace_decoder=True))


if __name__ == "__main__":
    main()

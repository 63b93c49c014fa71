#!/usr/bin/env python3
"""A copy of a small model directory with wider experts, for benchmarks where the experts' work dominates a
step (as in real MoE models, unlike the test fixtures): moe_intermediate_size set to INTERMEDIATE, every
routed expert's gate/up/down drawn uniform in +-1/sqrt(fan-in) (seeded), every other tensor, the tokenizer
and the configs copied. F32 safetensors only (the fixtures').

usage: wide_experts_model.py SRC_DIR DST_DIR INTERMEDIATE [SEED=1]
"""
import array
import json
import os
import random
import re
import shutil
import struct
import sys

src, dst, inter = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 1)
os.makedirs(dst, exist_ok=True)
for name in os.listdir(src):
    if name not in ("model.safetensors", "config.json") and not name.startswith("reference"):
        shutil.copy(os.path.join(src, name), dst)
config = json.load(open(os.path.join(src, "config.json")))
config["moe_intermediate_size"] = inter
json.dump(config, open(os.path.join(dst, "config.json"), "w"), indent=2)

with open(os.path.join(src, "model.safetensors"), "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    body = f.read()
header.pop("__metadata__", None)
tensors, offset, out = {}, 0, []
for name, info in sorted(header.items()):
    assert info["dtype"] == "F32", f"{name}: {info['dtype']}, only F32 checkpoints"
    shape = info["shape"]
    if re.search(r"\.experts\.\d+\.(gate|up)_proj\.weight$", name):
        shape = [inter, shape[1]]
    elif re.search(r"\.experts\.\d+\.down_proj\.weight$", name):
        shape = [shape[0], inter]
    if shape == info["shape"]:
        start, end = info["data_offsets"]
        data = body[start:end]
    else:
        bound = 1 / shape[1] ** 0.5
        data = array.array("f", (rng.uniform(-bound, bound) for _ in range(shape[0] * shape[1]))).tobytes()
    tensors[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
    out.append(data)
    offset += len(data)
text = json.dumps(tensors).encode()
text += b" " * (-len(text) % 8)
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for data in out:
        f.write(data)

#!/usr/bin/env python3
"""A random Qwen3-MoE block for the `moe layer --ep --backend cuda` check (pure Python: no numpy needed).

  ep_cli_case.py make DIR          writes DIR/config.json, DIR/weights.safetensors, DIR/input.safetensors
  ep_cli_case.py compare A B TOL   max |a - b| / max |b| of hidden_states over tokens whose topk_ids agree;
                                   exits 1 above TOL
"""
import array
import json
import random
import struct
import sys

H, I, E, K, T = 256, 128, 64, 6, 300


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        raw = data.tobytes()
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = array.array({"F32": "f", "I32": "i"}[info["dtype"]], body[begin:end])
    return out


def uniform(n, scale, rng):
    return array.array("f", (rng.uniform(-scale, scale) for _ in range(n)))


def make(directory):
    rng = random.Random(7)
    config = {"model_type": "qwen3_moe", "hidden_size": H, "moe_intermediate_size": I, "num_experts": E,
              "num_experts_per_tok": K, "norm_topk_prob": True, "hidden_act": "silu"}
    with open(f"{directory}/config.json", "w") as f:
        json.dump(config, f)
    s = 3 ** 0.5
    write_safetensors(f"{directory}/weights.safetensors", {
        "gate.weight": ("F32", [E, H], uniform(E * H, 4 * s / H ** 0.5, rng)),
        "experts.gate_up_proj": ("F32", [E, 2 * I, H], uniform(E * 2 * I * H, s / H ** 0.5, rng)),
        "experts.down_proj": ("F32", [E, H, I], uniform(E * H * I, s / I ** 0.5, rng)),
    })
    write_safetensors(f"{directory}/input.safetensors", {"hidden_states": ("F32", [T, H], uniform(T * H, s, rng))})


def compare(a_path, b_path, tolerance):
    a, b = read_safetensors(a_path), read_safetensors(b_path)
    worst, scale, same = 0.0, 1e-30, 0
    for t in range(T):
        agree = a["topk_ids"][t * K:(t + 1) * K] == b["topk_ids"][t * K:(t + 1) * K]
        same += agree
        for h in range(t * H, (t + 1) * H):
            scale = max(scale, abs(b["hidden_states"][h]))
            if agree:
                worst = max(worst, abs(a["hidden_states"][h] - b["hidden_states"][h]))
    print(f"max rel {worst / scale:.2e} over {same}/{T} tokens with the same choices (tolerance {tolerance})")
    return 0 if worst / scale <= tolerance and same >= T - max(1, T // 50) else 1


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(compare(sys.argv[2], sys.argv[3], float(sys.argv[4])))

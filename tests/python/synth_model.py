# SPDX-License-Identifier: MIT
"""Synthetic Llama-shaped model folders of any size, for the streaming tests of `qsparse quantize`.

    write_model(path, layers=4, hidden=256, intermediate=688, vocab=1000, shards=2,
                dtype="bf16")

writes config.json, a tokenizer file and `shards` safetensors files with
model.safetensors.index.json, with the names a Llama checkpoint has (model.embed_tokens,
model.layers.N.self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, the norms, lm_head). Layers
are spread over the shards in order; the embedding goes with the first shard, the final norm and
lm_head with the last. Each file is written a tensor at a time (header first, then each tensor
generated and written), so a model larger than memory costs the memory of one tensor. The
values are deterministic: a fixed block of normal values (std 0.02, like an initialised model),
rotated and scaled per tensor, cheap enough for gigabytes.

Run as a script it writes the model and prints its size:
    python3 tests/python/synth_model.py DIR --layers 20 --hidden 4096 --intermediate 11008 \
        --vocab 32000 --shards 4 --dtype bf16
"""

import argparse
import json
import os
import struct

import numpy as np

_BLOCK = 1 << 20


def _block():
    return (np.random.default_rng(12345).standard_normal(_BLOCK) * 0.02).astype(np.float32)


def tensors(layers, hidden, intermediate, vocab):
    """[(name, shape, layer)] in checkpoint order; layer -1 first (embedding), layers+1 last."""
    out = [("model.embed_tokens.weight", (vocab, hidden), -1)]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (hidden,), i),
                (p + "self_attn.q_proj.weight", (hidden, hidden), i),
                (p + "self_attn.k_proj.weight", (hidden, hidden), i),
                (p + "self_attn.v_proj.weight", (hidden, hidden), i),
                (p + "self_attn.o_proj.weight", (hidden, hidden), i),
                (p + "post_attention_layernorm.weight", (hidden,), i),
                (p + "mlp.gate_proj.weight", (intermediate, hidden), i),
                (p + "mlp.up_proj.weight", (intermediate, hidden), i),
                (p + "mlp.down_proj.weight", (hidden, intermediate), i)]
    out += [("model.norm.weight", (hidden,), layers), ("lm_head.weight", (vocab, hidden), layers)]
    return out


def _values(index, n, block):
    """n float32 values of tensor number `index`: the block rotated and scaled."""
    reps = -(-n // _BLOCK)
    v = np.roll(block, index * 7919) * np.float32(1 + (index % 13) / 13)
    return np.tile(v, reps)[:n] if reps > 1 else v[:n].copy()


def _encode(v, dtype):
    if dtype == "f32":
        return v.astype("<f4").tobytes()
    if dtype == "f16":
        return v.astype("<f2").tobytes()
    u = v.astype("<f4").view("<u4")  # bf16: round to nearest even on the top 16 bits
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write_model(path, layers=4, hidden=256, intermediate=688, vocab=1000, shards=2, dtype="bf16"):
    """Write the model folder; returns {"bytes": total tensor bytes, "largest": bytes of the
    largest tensor, "largest_linear": bytes of the largest linear weight}."""
    esz = {"f32": 4, "f16": 2, "bf16": 2}[dtype]
    st = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[dtype]
    os.makedirs(path, exist_ok=True)
    block = _block()
    every = tensors(layers, hidden, intermediate, vocab)
    per = -(-layers // shards)
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]

    def shard_of(layer):
        return 0 if layer < 0 else min(shards - 1, layer // per if layer < layers else shards - 1)

    weight_map, total, largest, largest_linear = {}, 0, 0, 0
    for s, fname in enumerate(names):
        mine = [(i, t) for i, t in enumerate(every) if shard_of(t[2]) == s]
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for _, (name, shape, _) in mine:
            n = int(np.prod(shape)) * esz
            header[name] = {"dtype": st, "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
            weight_map[name] = fname
            largest = max(largest, n)
            if len(shape) == 2 and "embed" not in name and "lm_head" not in name:
                largest_linear = max(largest_linear, n)
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(path, fname), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
            for i, (name, shape, _) in mine:
                rows = shape[0]
                cols = int(np.prod(shape[1:])) if len(shape) > 1 else 1
                step = max(1, (1 << 24) // cols)  # write in pieces of at most 16 M values
                for r0 in range(0, rows, step):
                    m = min(step, rows - r0)
                    v = _values(i * 1000003 + r0, m * cols, block)
                    if len(shape) == 1:
                        v = 1.0 + v  # norms near 1
                    f.write(_encode(v, dtype))
        total += off
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "hidden_size": hidden, "intermediate_size": intermediate,
                   "num_hidden_layers": layers, "num_attention_heads": max(1, hidden // 128),
                   "num_key_value_heads": max(1, hidden // 128), "vocab_size": vocab,
                   "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
                   "torch_dtype": {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[dtype]},
                  f, indent=2)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": 2048}, f)
    return {"bytes": total, "largest": largest, "largest_linear": largest_linear}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    a = ap.parse_args()
    info = write_model(a.dir, a.layers, a.hidden, a.intermediate, a.vocab, a.shards, a.dtype)
    print(json.dumps(info))


if __name__ == "__main__":
    main()

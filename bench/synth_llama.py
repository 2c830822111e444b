"""Writes a synthetic Llama-shaped Hugging Face checkpoint (bf16, sharded safetensors + index + config.json)
for the large-model quantize benchmark: random weights, one tensor at a time (never more than one tensor in
memory). Each weight is a random bf16 bit pattern with a random sign, mantissa and one of four exponents
(magnitudes 2^-11 .. 2^-7, like a trained layer's): made from raw generator bytes, because drawing 2.3 G normal
variates takes tens of minutes on a small shared machine; norms are 1.

usage: python bench/synth_llama.py OUT_DIR [--layers 12] [--hidden 4096] [--inter 11008] [--vocab 32000]
       [--shard-gib 2] [--seed 0]
Default: 12 layers -> 4.78 GB (4.45 GiB) of bf16 (GQA: k/v 1024 wide), the largest tensor the 32000x4096
embedding / lm_head (524 MB as fp32).
Written to a scratch directory (e.g. ~/.cache/lowbit/bench), never into the repository.
"""
import argparse
import json
import os
import struct

import numpy as np


def random_bf16(rng, count):
    """count random finite bf16 values, as bytes: sign and mantissa random, exponent 116..119."""
    u = np.frombuffer(rng.bytes(2 * count), dtype=np.uint16)
    return ((u & 0x81FF) | 0x3A00).astype("<u2").tobytes()


def tensors(a):
    h, i, v, kv = a.hidden, a.inter, a.vocab, a.hidden // a.heads * a.kv_heads
    yield "model.embed_tokens.weight", (v, h)
    for n in range(a.layers):
        p = f"model.layers.{n}."
        yield p + "input_layernorm.weight", (h,)
        for m, shape in (("q_proj", (h, h)), ("k_proj", (kv, h)), ("v_proj", (kv, h)), ("o_proj", (h, h))):
            yield p + f"self_attn.{m}.weight", shape
        yield p + "post_attention_layernorm.weight", (h,)
        for m, shape in (("gate_proj", (i, h)), ("up_proj", (i, h)), ("down_proj", (h, i))):
            yield p + f"mlp.{m}.weight", shape
    yield "model.norm.weight", (h,)
    yield "lm_head.weight", (v, h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--inter", type=int, default=11008)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--shard-gib", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=False)
    rng = np.random.default_rng(a.seed)
    limit = int(a.shard_gib * 2**30)
    shards, cur, size = [], [], 0
    for name, shape in tensors(a):  # plan the shards first (sizes only)
        nbytes = 2 * int(np.prod(shape))
        if cur and size + nbytes > limit:
            shards.append(cur)
            cur, size = [], 0
        cur.append((name, shape, nbytes))
        size += nbytes
    shards.append(cur)
    weight_map, total = {}, 0
    for k, shard in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header, off = {}, 0
        for name, shape, nbytes in shard:
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + nbytes]}
            off += nbytes
            weight_map[name] = fname
        hj = json.dumps(header, separators=(",", ":")).encode()
        hj += b" " * (-len(hj) % 8)
        with open(os.path.join(a.out, fname), "wb") as f:
            f.write(struct.pack("<Q", len(hj)) + hj)
            for name, shape, nbytes in shard:
                count = int(np.prod(shape))
                if len(shape) == 1:
                    f.write(np.full(count, 0x3F80, "<u2").tobytes())  # bf16 1.0
                else:
                    f.write(random_bf16(rng, count))
        total += off
        print(f"{fname}: {len(shard)} tensors, {off / 2**30:.2f} GiB", flush=True)
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": a.hidden,
           "intermediate_size": a.inter, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
           "num_key_value_heads": a.kv_heads, "head_dim": a.hidden // a.heads, "vocab_size": a.vocab,
           "max_position_embeddings": 4096, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
           "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "bfloat16"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"{a.out}: {total / 2**30:.2f} GiB of bf16 in {len(shards)} shards")


if __name__ == "__main__":
    main()

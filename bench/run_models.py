"""Model-file benchmarks: read + convert to fp32 (bench_read) on SmolLM2's
GGUF and on a synthetic Llama-shaped bf16 safetensors checkpoint of more
than 4 GiB, and the peak resident memory of `lowbit error` on that
checkpoint (it must stream: far below the file's size).

usage: run_models.py BUILD_DIR [--keep]
The synthetic checkpoint is written once to .cache/bench/ (11 layers of a
4096-wide Llama block, bf16: 4.4 GiB) and reused."""
import os
import pathlib
import subprocess
import sys
import time

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / (sys.argv[1] if len(sys.argv) > 1 else "build")
SMOL = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
BIG = ROOT / ".cache/bench/llama-4096x11-bf16.safetensors"
DIM, HIDDEN, LAYERS, VOCAB = 4096, 11008, 11, 32000


def make_big():
    if BIG.exists():
        return
    BIG.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    base = (rng.standard_normal(1 << 24, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)

    def mat(rows, cols, k):  # a rotation of a random pool: cheap, not constant
        n = rows * cols
        reps = -(-n // base.size)
        return np.roll(np.tile(base, reps)[:n], k * 7919).reshape(rows, cols)

    t = {"model.embed_tokens.weight": mat(VOCAB, DIM, 0), "model.norm.weight": np.ones(DIM, ml_dtypes.bfloat16)}
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        for k, (name, r, c) in enumerate([("self_attn.q_proj", DIM, DIM), ("self_attn.k_proj", DIM, DIM),
                                          ("self_attn.v_proj", DIM, DIM), ("self_attn.o_proj", DIM, DIM),
                                          ("mlp.gate_proj", HIDDEN, DIM), ("mlp.up_proj", HIDDEN, DIM),
                                          ("mlp.down_proj", DIM, HIDDEN)]):
            t[p + name + ".weight"] = mat(r, c, 10 * l + k)
        t[p + "input_layernorm.weight"] = np.ones(DIM, ml_dtypes.bfloat16)
        t[p + "post_attention_layernorm.weight"] = np.ones(DIM, ml_dtypes.bfloat16)
    tmp = BIG.with_suffix(".tmp")
    save_file(t, str(tmp))
    tmp.rename(BIG)


def bench_read(path):
    return subprocess.run([str(BUILD / "bench/bench_read"), str(path)], check=True, capture_output=True,
                          text=True).stdout.strip()


def peak_rss_of(cmd):
    """Runs cmd under /usr/bin/time; returns (seconds, peak RSS of that one
    process in bytes). (getrusage's RUSAGE_CHILDREN would report the largest
    of all children so far, bench_read's included.)"""
    t0 = time.time()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    return time.time() - t0, int(p.stderr.strip().splitlines()[-1]) * 1024


def main():
    make_big()
    print("| model | tensors | stored GB | fp32 GB | GB/s stored | GB/s fp32 | × memcpy |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for p in [SMOL, BIG]:
        print(bench_read(p).replace(str(ROOT) + "/", ""))
    print()
    secs, rss = peak_rss_of([str(BUILD / "lowbit"), "error", str(BIG), "--spec", "int8:channel"])
    size = BIG.stat().st_size
    largest = VOCAB * DIM * 4
    print(f"`lowbit error {BIG.relative_to(ROOT)} --spec int8:channel`: {secs:.1f} s, peak RSS "
          f"{rss / 2**30:.2f} GiB for a {size / 2**30:.2f} GiB checkpoint ({rss / size:.2f}× its size; "
          f"the largest tensor is {largest / 2**30:.2f} GiB as fp32)")


if __name__ == "__main__":
    main()

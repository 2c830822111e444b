"""Evaluation benchmarks on SmolLM2-135M (its GGUF weights dequantized to
f32: the reference model) and wiki.test.raw: prefill speed of lowbit ppl
against the machine's peak fp32 FMA rate, and lowbit compare's table
(perplexity, KL divergence, top-1 agreement) under each spec.

usage: run_eval.py BUILD_DIR [CHUNKS]   (default 24 windows of 512 tokens)"""
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / (sys.argv[1] if len(sys.argv) > 1 else "build")
CHUNKS = int(sys.argv[2]) if len(sys.argv) > 2 else 24
SMOL = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = ROOT / "data/wikitext-2-raw/wiki.test.raw"
SPECS = "bf16,fp8_e4m3:channel,int8:channel,int4:g128,int4:g32,mxfp4,nvfp4"


def run(*args):
    p = subprocess.run([*map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))}: {p.stderr}")
    return p.stdout


def main():
    matmul = run(BUILD / "bench/bench_matmul")
    peak = float(re.search(r"([0-9.]+) GFLOP/s on 2 threads", matmul).group(1))
    ppl = json.loads(run(BUILD / "lowbit", "ppl", SMOL, "--text", TEXT, "--ctx", 512, "--chunks", CHUNKS,
                         "--threads", 2, "--json"))
    # FLOPs per token of the forward pass: 2 x every matmul weight (the tied head included once more, as a
    # matmul; the embedding lookup is free) plus attention over on average ctx/2 positions:
    # 30 layers x 2 x 9 heads x (64 + 64) x 256
    params, emb = 134_515_008, 49152 * 576
    flops = 2 * (params - emb + emb) + 30 * 2 * 9 * (64 + 64) * 256
    gflops = ppl["tokens_per_s"] * flops / 1e9
    print("### Prefill speed (`lowbit ppl`, SmolLM2-135M, f32 weights, ctx 512, 2 threads)\n")
    print(matmul.strip() + "\n")
    print(f"`lowbit ppl` prefill: {ppl['tokens_per_s']:.0f} tokens/s; at {flops / 1e6:.0f} MFLOP per token that is "
          f"{gflops:.1f} GFLOP/s for the whole forward pass, {gflops / peak:.2f} of the {peak:.1f} GFLOP/s peak "
          f"(the matmuls alone: the table above).\n")
    cmp = json.loads(run(BUILD / "lowbit", "compare", SMOL, "--text", TEXT, "--ctx", 512, "--chunks", CHUNKS,
                         "--threads", 2, "--spec", SPECS, "--json"))
    print(f"### Quality (`lowbit compare`, {cmp['chunks']} windows of 512 tokens of wiki.test.raw, "
          f"{cmp['scored_tokens']} scored tokens)\n")
    print("| spec (attention + MLP) | bits/weight | size MB | SQNR dB | PPL | ± | ΔPPL | ± | KLD mean | top-1 agree % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| as stored, run in f32 (the reference) | | {cmp['size_bytes'] / 1e6:.1f} (the GGUF) | | {cmp['ppl']:.4f} | "
          f"{cmp['ppl_err']:.4f} | | | | |")
    for s in cmp["specs"]:
        print(f"| {s['spec']} | {s['bits_per_weight']:.3f} | {s['size_bytes'] / 1e6:.1f} | {s['sqnr_db']:.2f} | "
              f"{s['ppl']:.4f} | {s['ppl_err']:.4f} | {s['dppl']:+.4f} | {s['dppl_err']:.4f} | {s['kld_mean']:.5f} | "
              f"{100 * s['top1_agreement']:.2f} |")


if __name__ == "__main__":
    main()

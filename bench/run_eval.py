"""Evaluation benchmarks: perplexity and KL divergence of SmolLM2-135M
(its dequantized GGUF weights as the f32 reference) on wiki.test.raw under
each spec, and prefill speed.

usage: run_eval.py BUILD_DIR [CHUNKS]   (default 16 windows of 512 tokens)"""
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / (sys.argv[1] if len(sys.argv) > 1 else "build")
CHUNKS = int(sys.argv[2]) if len(sys.argv) > 2 else 16
SMOL = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = ROOT / "data/wikitext-2-raw/wiki.test.raw"
SPECS = ["bf16", "fp8_e4m3:channel", "int8:channel", "int4:g128", "int4:g32", "mxfp4", "nvfp4"]


def lowbit(*args):
    p = subprocess.run([str(BUILD / "lowbit"), *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"lowbit {' '.join(map(str, args))}: {p.stderr}")
    return json.loads(p.stdout)


def main():
    common = ["--text", TEXT, "--ctx", 512, "--chunks", CHUNKS, "--threads", 2, "--json"]
    base = lowbit("ppl", SMOL, *common)
    print(f"Model: {SMOL.name} (weights dequantized to f32: the reference), text: {TEXT.name}, "
          f"{base['chunks']} windows of 512 tokens ({base['scored_tokens']} scored tokens), 2 threads.\n")
    print("| spec (attention + MLP) | PPL | ± | ΔPPL | ± | KLD mean | KLD p99 | top-1 agree % | prefill tokens/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| f32 (reference) | {base['ppl']:.4f} | {base['ppl_err']:.4f} | | | | | | {base['tokens_per_s']:.0f} |")
    with tempfile.TemporaryDirectory() as tmp:
        saved = pathlib.Path(tmp) / "base.kld"
        for i, spec in enumerate(SPECS):
            if spec == "bf16":
                spec_args = ["--spec", "bf16"]
            else:
                spec_args = ["--spec", spec]
            k = lowbit("kld", SMOL, *spec_args, *common, *(["--save-base", saved] if i == 0 else ["--base", saved]))
            p = lowbit("ppl", SMOL, *spec_args, *common)
            print(f"| {spec} | {k['ppl']:.4f} | {k['ppl_err']:.4f} | {k['dppl']:+.4f} | {k['dppl_err']:.4f} | "
                  f"{k['kld_mean']:.5f} | {k['kld_p99']:.4f} | {100 * k['top1_agreement']:.2f} | {p['tokens_per_s']:.0f} |")


if __name__ == "__main__":
    main()

"""How far apart two correct evaluations of one GGUF can land (BENCHMARKS.md, "GGUF quality").

For each type, the SmolLM2 F32 model is quantized by lowbit and evaluated on the same windows of
wiki.test.raw six ways, each keeping the log-probability of every scored token:

  llama default     llama-perplexity as the test runs it (f16 KV cache, flash attention auto)
  llama f32 KV      llama-perplexity -ctk f32 -ctv f32 -fa off
  lowbit ggml       lowbit kld --act ggml (the test's lowbit side: llama.cpp's 8-bit matmul inputs)
  lowbit ggml kv16  the same with --kv fp16 (llama.cpp's default cache type)
  lowbit fp32       lowbit kld (fp32 activations)
  lowbit fp32 kv16  the same with --kv fp16

Each run is then compared with "lowbit ggml", token by token: the PPL ratio, the mean NLL difference
with its standard error over windows (tokens of a window share a context, so the window is the
honest unit), the share of windows where the run is lower, and the size of the per-token
differences (median and standard deviation of |d|). A pair that differs only in the last bits of
its arithmetic (f16 vs f32 KV cache) shows how much the PPL of the 8 windows moves for reasons that
are no error of either tool.

llama.cpp's run keeps its log-probabilities through --kl-divergence-base (16 bits each, clamped at
16 nats below the token of highest probability: tokens whose target falls there are left out of the
token comparison and counted; the PPL column is each tool's own figure).

usage: .venv/bin/python bench/gguf_ppl_noise.py LLAMACPP_BIN [--types Q5_K_M,Q5_K_S] [--chunks 8]
       [--build build]
Runs whose outputs exist in the scratch folder (~/.cache/lowbit/bench-gguf-noise, or
$LOWBIT_BENCH_DIR) are reused; about 1-2 CPU-minutes a run."""
import argparse
import json
import os
import pathlib
import re
import subprocess

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = ROOT / "data/wikitext-2-raw/wiki.test.raw"
CTX = 512
LLAMA_RUNS = {"llama default": [], "llama f32 KV": ["-ctk", "f32", "-ctv", "f32", "-fa", "off"]}
LOWBIT_RUNS = {"lowbit ggml": ["--act", "ggml"], "lowbit ggml kv16": ["--act", "ggml", "--kv", "fp16"],
               "lowbit fp32": [], "lowbit fp32 kv16": ["--kv", "fp16"]}
REFERENCE = "lowbit ggml"


def sh(args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{args[0]} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def llama_nll(path):
    """per scored token (window after window): the NLL of the target, and whether its log-probability
    was clamped (the file keeps max-16 nats at most; below that the value is lost)."""
    head = np.fromfile(path, np.int32, 5)
    if head[:2].tobytes() != b"_logits_":
        raise SystemExit(f"{path}: no llama.cpp logits file")
    n_ctx, n_vocab, n_chunk = (int(v) for v in head[2:5])
    toks = np.fromfile(path, np.int32, n_chunk * n_ctx, offset=20).reshape(n_chunk, n_ctx)
    nv = 2 * ((n_vocab + 1) // 2) + 4  # per token: fp32 scale, fp32 min log-prob, n_vocab uint16, padding
    first = n_ctx // 2
    n = n_ctx - 1 - first  # scored per window: the logits at first .. n_ctx-2
    raw = np.memmap(path, np.uint16, "r", 20 + 4 * n_chunk * n_ctx, (n_chunk, n, nv))
    nll, clamped = np.empty((n_chunk, n)), np.empty((n_chunk, n), bool)
    for c in range(n_chunk):
        hdr = np.ascontiguousarray(raw[c, :, :4]).view(np.float32)
        code = raw[c, np.arange(n), 4 + toks[c, first + 1:first + 1 + n]].astype(np.float64)
        nll[c] = -(hdr[:, 0] * code + hdr[:, 1])
        clamped[c] = code == 0
    return nll.ravel(), clamped.ravel()


def lowbit_nll(path):
    a = np.loadtxt(path, comments="#", delimiter="\t", ndmin=2)  # window, position, kld, nll_base, nll_quant
    return a[:, 4]


def compare(nll, ref, keep, chunks):
    d = np.where(keep, nll - ref, np.nan).reshape(chunks, -1)
    win = np.nanmean(d, axis=1)
    d = d[~np.isnan(d)]
    se = win.std(ddof=1) / np.sqrt(chunks) if chunks > 1 else float("nan")
    return d.mean(), se, float((win < 0).mean()), np.median(np.abs(d)), d.std()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("llamacpp_bin")
    ap.add_argument("--types", default="Q5_K_M,Q5_K_S")
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    lb = str((ROOT / a.build / "lowbit").resolve())
    llb = pathlib.Path(a.llamacpp_bin)
    d = pathlib.Path(os.environ.get("LOWBIT_BENCH_DIR", pathlib.Path.home() / ".cache/lowbit/bench-gguf-noise"))
    d.mkdir(parents=True, exist_ok=True)
    f32 = d / "smollm2-f32.gguf"
    if not f32.exists():
        sh([lb, "convert", SMOLLM2, f32, "--dtype", "f32", "--quiet"])
    window = ["--ctx", CTX, "--chunks", a.chunks]
    base = d / f"lowbit-base-{a.chunks}.kldb"
    if not base.exists():
        sh([lb, "kld", f32, f32, "--text", WIKI, *window, "--save-base", base, "--quiet", "--json"])
    print(f"# SmolLM2 F32 quantized by lowbit; {a.chunks} windows of {CTX} of wiki.test.raw; "
          f"every run compared with '{REFERENCE}' token by token (d = run - reference, in nats)")
    for t in a.types.split(","):
        q = d / f"{t}.gguf"
        if not q.exists():
            sh([lb, "quantize", f32, "-o", q, "--format", "gguf", "--type", t, "--quiet", "--force"])
        nll, ppl, clamped = {}, {}, np.zeros(a.chunks * (CTX - 1 - CTX // 2), bool)
        for name, opts in LLAMA_RUNS.items():
            stem = d / f"{t}-{a.chunks}-{name.replace(' ', '_')}"
            out, log = stem.with_suffix(".logits"), stem.with_suffix(".log")
            if not out.exists() or not log.exists():
                r = sh([llb / "llama-perplexity", "-m", q, "-f", WIKI, "-c", CTX, "--chunks", a.chunks,
                        "--kl-divergence-base", out, "-t", 2, *opts])
                log.write_text(r.stdout + r.stderr)
            ppl[name] = float(re.search(r"Final estimate: PPL = ([0-9.]+)", log.read_text()).group(1))
            nll[name], c = llama_nll(out)
            clamped |= c
        for name, opts in LOWBIT_RUNS.items():
            stem = d / f"{t}-{a.chunks}-{name.replace(' ', '_')}"
            tok, js = stem.with_suffix(".tsv"), stem.with_suffix(".json")
            if not tok.exists() or not js.exists():
                tok.unlink(missing_ok=True)  # kld writes over no file
                r = sh([lb, "kld", f32, q, "--base", base, "--text", WIKI, *window, *opts, "--save-tokens", tok,
                        "--quiet", "--json"])
                js.write_text(r.stdout)
            ppl[name] = json.loads(js.read_text())["ppl"]
            nll[name] = lowbit_nll(tok)
        ref = nll[REFERENCE]
        print(f"\n## {t}: {len(ref)} scored tokens, {int(clamped.sum())} left out of the token comparison "
              f"(clamped in llama.cpp's file)")
        print(f"| run | PPL | PPL / {REFERENCE} | mean d | se (windows) | windows lower | median abs d | std d |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name in [*LLAMA_RUNS, *LOWBIT_RUNS]:
            m, se, lower, med, sd = compare(nll[name], ref, ~clamped, a.chunks)
            print(f"| {name} | {ppl[name]:.4f} | {ppl[name] / ppl[REFERENCE] - 1:+.2%} | {m:+.4f} | {se:.4f} | "
                  f"{lower:.0%} | {med:.5f} | {sd:.4f} |", flush=True)
        m, se, lower, med, sd = compare(nll["lowbit fp32 kv16"], nll["lowbit fp32"], ~clamped, a.chunks)
        print(f"\nfp32 activations, kv16 against fp32 KV: PPL {ppl['lowbit fp32 kv16'] / ppl['lowbit fp32'] - 1:+.4%}, "
              f"median abs d {med:.5f}, std d {sd:.5f} (the same perturbation without 8-bit matmul inputs)")


if __name__ == "__main__":
    main()

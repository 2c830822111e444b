"""GPTQ GGUF against llama.cpp's own quantizer, judged by llama.cpp (issue 16, "GGUF"): on SmolLM2,
lowbit's GPTQ Q4_K_M, Q4_0 and IQ4_XS (with and without --actorder, with and without the imatrix) and
llama-quantize's Q4_K_M without and with an imatrix, Q4_0 and IQ4_XS with one, the imatrix made by
llama-imatrix from the same calibration text, every file's KLD against the F32 model measured by
llama-perplexity itself (--kl-divergence), on the same windows of wiki.test.raw.

usage: .venv/bin/python bench/gptq_gguf_bench.py LLAMACPP_BIN [--build build] [--chunks 40]
       [--calib-seqs 128] [--calib-len 512] [--threads 2] [--rows r1,r2,...]
LLAMACPP_BIN: the folder of llama-quantize, llama-imatrix, llama-perplexity (`make llamacpp` prints it).
Scratch: ~/.cache/lowbit/bench-gptq-gguf (LOWBIT_BENCH_DIR).

The F32 model is the SmolLM2 Q4_1 GGUF dequantized by `lowbit convert` (the reference of every row).
Calibration: the WikiText-2 train excerpt. lowbit takes --calib-seqs windows of --calib-len tokens;
llama-imatrix takes the same text in --calib-seqs chunks of --calib-len (-c, --chunks), so both see the
same tokens. Evaluation: llama-perplexity -c 512 --chunks N with lowbit's KV-cache arithmetic (f32
cache, no flash attention), 2 threads. "s" is each quantizer's wall time (for llama-quantize with an
imatrix: llama-imatrix's time + llama-quantize's)."""
import argparse
import os
import pathlib
import subprocess
import time

from llamacpp_kld import parse_kl_divergence

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = ROOT / "data/wikitext-2-raw/wiki.test.raw"
CALIB = ROOT / "data/wikitext-2-raw/wiki.train.excerpt.raw"
SAME_CACHE = ["-ctk", "f32", "-ctv", "f32", "-fa", "off"]
# who-type[-gptq][-imatrix][-ao]: "ao": columns in decreasing Hessian diagonal (act order, the default); a gptq
# row without it rounds them in the file's order (--no-actorder)
ROWS = ["llama-q4_k_m", "llama-q4_k_m-imatrix", "lowbit-q4_k_m", "lowbit-q4_k_m-gptq-ao", "lowbit-q4_k_m-gptq-imatrix-ao",
        "lowbit-q4_k_m-gptq", "lowbit-q4_0-gptq-ao", "llama-q4_0-imatrix", "lowbit-iq4_xs-gptq-ao", "llama-iq4_xs-imatrix"]


def sh(args):
    t0 = time.perf_counter()
    r = subprocess.run([str(x) for x in args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{args[0]} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r, time.perf_counter() - t0


def reference(lb, llb, chunks, t):
    """the scratch folder, the F32 SmolLM2 (the reference of every row) and llama-perplexity's base logits on
    `chunks` windows of wiki.test.raw, each made once"""
    d = pathlib.Path(os.environ.get("LOWBIT_BENCH_DIR", pathlib.Path.home() / ".cache/lowbit/bench-gptq-gguf"))
    d.mkdir(parents=True, exist_ok=True)
    f32 = d / "f32.gguf"
    if not f32.exists():
        sh([lb, "convert", SMOLLM2, f32, "--dtype", "f32", "--quiet"])
    base = d / f"base-{chunks}.kld"
    if not base.exists():
        sh([llb / "llama-perplexity", "-m", f32, "-f", WIKI, "-c", 512, "--chunks", chunks, *SAME_CACHE,
            "--kl-divergence-base", base, "-t", t])
    return d, f32, base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("llamacpp_bin", type=pathlib.Path)
    ap.add_argument("--build", default="build")
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--calib-seqs", type=int, default=128)
    ap.add_argument("--calib-len", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default=",".join(ROWS))
    a = ap.parse_args()
    lb, llb = str((ROOT / a.build / "lowbit").resolve()), a.llamacpp_bin
    t = str(a.threads)
    d, f32, base = reference(lb, llb, a.chunks, t)
    imatrix, t_imatrix = d / f"imatrix-{a.calib_seqs}x{a.calib_len}.gguf", 0.0
    rows = a.rows.split(",")
    if any("imatrix" in r for r in rows):
        _, t_imatrix = sh([llb / "llama-imatrix", "-m", f32, "-f", CALIB, "-c", a.calib_len, "--chunks",
                           a.calib_seqs, "-o", imatrix, "-t", t])
    calib = ["--calib", CALIB, "--calib-seqs", a.calib_seqs, "--calib-len", a.calib_len]
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPUs; "
          f"{a.calib_seqs} x {a.calib_len} calibration tokens; {a.chunks} windows of 512; llama-imatrix "
          f"{t_imatrix:.1f} s")
    print("| file | size MiB | KLD (llama-perplexity) | PPL | same top-1 | quantize s |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        out = d / f"{row}.gguf"
        who, typ, *rest = row.split("-")
        if who == "llama":
            args = [llb / "llama-quantize"] + (["--imatrix", imatrix] if "imatrix" in rest else []) + \
                   [f32, out, typ.upper(), t]
            _, dt = sh(args)
            dt += t_imatrix if "imatrix" in rest else 0.0
        else:
            args = [lb, "quantize", f32, "-o", out, "--type", typ.upper(), "--quiet", "--force", "--threads", t]
            if "gptq" in rest:
                args += ["--method", "gptq", *calib]
            if "imatrix" in rest:
                args += ["--imatrix", imatrix]
            if "gptq" in rest and "ao" not in rest:
                args += ["--no-actorder"]
            _, dt = sh(args)
        r, _ = sh([llb / "llama-perplexity", "-m", out, "-f", WIKI, "-c", 512, "--chunks", a.chunks, *SAME_CACHE,
                   "--kl-divergence-base", base, "--kl-divergence", "-t", t])
        k = parse_kl_divergence(r.stdout + r.stderr)
        print(f"| {row} | {out.stat().st_size / 2**20:.2f} | {k['kld']:.6f} +- {k['kld_err']:.6f} | {k['ppl']:.6f} | "
              f"{k['top1']:.4f} | {dt:.1f} |", flush=True)


if __name__ == "__main__":
    main()

"""Sensitivity and mixed precision on SmolLM2 (issue 18), judged by llama.cpp: lowbit sensitivity's ranking
(classes and layers on 40 windows of wiki.test.raw, tensors on fewer), then lowbit quantize --target-bpw
4.5 and 5.0 and --target-size of llama-quantize's Q4_K_M tensors (one measurement shared through
--sweep), every file's KLD against the F32 model measured by llama-perplexity itself on 40 windows of 512,
beside llama-quantize's Q4_K_M without and with an imatrix and the uniform type each mix was checked
against.

usage: .venv/bin/python bench/mix_bench.py LLAMACPP_BIN [--build build] [--chunks 40] [--tensor-chunks 8]
       [--calib-tokens 2048] [--threads 2] [--sections sensitivity,mix]
Scratch: ~/.cache/lowbit/bench-gptq-gguf (LOWBIT_BENCH_DIR), shared with bench/gptq_gguf_bench.py (the F32
model, the base logits, llama-imatrix's imatrix of 128 x 512 tokens of the train excerpt, llama-quantize's
Q4_K_M files).

The candidates (lowbit's defaults for a GGUF: Q3_K, IQ4_XS, Q4_K, Q5_K, Q6_K, Q8_0, each falling back as
llama-quantize does where SmolLM2's 576-wide rows do not fit 256-blocks) are quantized with the same
imatrix as llama-quantize's imatrix Q4_K_M; the costs are measured on --calib-tokens of the train excerpt
(never the evaluation text)."""
import argparse
import json
import os
import pathlib
import subprocess
import time

from gptq_gguf_bench import CALIB, SAME_CACHE, WIKI, reference, sh
from llamacpp_kld import parse_kl_divergence

ROOT = pathlib.Path(__file__).resolve().parents[1]


def tensor_bytes(lb, path):
    r = subprocess.run([lb, "inspect", str(path), "--json", "--quiet"], capture_output=True, text=True, check=True)
    return sum(t["bytes"] for t in json.loads(r.stdout)["tensors"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("llamacpp_bin", type=pathlib.Path)
    ap.add_argument("--build", default="build")
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--tensor-chunks", type=int, default=8)
    ap.add_argument("--calib-tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sections", default="sensitivity,mix")
    a = ap.parse_args()
    lb, llb, t = str((ROOT / a.build / "lowbit").resolve()), a.llamacpp_bin, str(a.threads)
    d, f32, base = reference(lb, llb, a.chunks, t)
    imatrix = d / "imatrix-128x512.gguf"
    if not imatrix.exists():
        sh([llb / "llama-imatrix", "-m", f32, "-f", CALIB, "-c", 512, "--chunks", 128, "-o", imatrix, "-t", t])
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPUs", flush=True)
    sections = a.sections.split(",")
    if "sensitivity" in sections:
        for units, chunks in (("class,layer", a.chunks), ("tensor", a.tensor_chunks)):
            r, dt = sh([lb, "sensitivity", f32, "--type", "Q4_K_M", "--text", WIKI, "--chunks", chunks, "--unit", units,
                        "--proxy-text", CALIB, "--threads", t, "--json", "--quiet"])
            s = json.loads(r.stdout)
            (d / f"sensitivity-{units.replace(',', '-')}.json").write_text(r.stdout)
            print(f"\n## sensitivity --unit {units}: {chunks} windows of 512, {len(s['units'])} units, "
                  f"{s['seconds']:.0f} s ({s['seconds_per_unit']:.1f} s per unit); PPL as stored "
                  f"{s['ppl_base']:.4f}; proxy rank correlation {s['rank_correlation']}", flush=True)
            print("| kind | rank | unit | KLD | dPPL | MiB saved | proxy |\n|---|---:|---|---:|---:|---:|---:|")
            for kind in units.split(","):
                rows = [u for u in s["units"] if u["kind"] == kind][:10]
                for u in rows:
                    proxy = "n/a" if u["proxy"] is None else f"{u['proxy']:.4g}"
                    print(f"| {kind} | {u['rank']} | {u['name']} | {u['kld']:.6f} +- {u['kld_err']:.6f} | "
                          f"{u['dppl']:+.4f} | {(u['bits_stored'] - u['bits']) / 8 / 2**20:.2f} | {proxy} |",
                          flush=True)
    if "mix" in sections:
        q4km = d / "llama-q4_k_m.gguf"
        if not q4km.exists():
            sh([llb / "llama-quantize", f32, q4km, "Q4_K_M", t])
        q4km_im = d / "llama-q4_k_m-imatrix.gguf"
        if not q4km_im.exists():
            sh([llb / "llama-quantize", "--imatrix", imatrix, f32, q4km_im, "Q4_K_M", t])
        size = tensor_bytes(lb, q4km)
        sweep = d / f"mix-sweep-{a.calib_tokens}.json"
        common = ["--calib", CALIB, "--calib-tokens", a.calib_tokens, "--imatrix", imatrix, "--sweep", sweep,
                  "--threads", t, "--quiet", "--force", "--json"]
        rows = [("llama-quantize Q4_K_M", q4km, None, 0.0), ("llama-quantize Q4_K_M, imatrix", q4km_im, None, 0.0)]
        for name, target in (("mix-4.5", ["--target-bpw", 4.5]), ("mix-5.0", ["--target-bpw", 5.0]),
                             ("mix-q4km-size", ["--target-size", size])):
            out = d / f"{name}.gguf"
            r, dt = sh([lb, "quantize", f32, "-o", out, *target, *common])
            m = json.loads(r.stdout)["mix"]
            (d / f"{name}.json").write_text(r.stdout)
            print(f"\n# {name}: {m['bpw']:.3f} bpw, predicted {m['kld_predicted']:.6f}, measured on the calibration "
                  f"windows {m['kld_measured']:.6f}; uniform {m['uniform']}; {dt:.0f} s", flush=True)
            rows.append((f"lowbit {name}", out, m, dt))
            u = m["uniform"]
            if u and not (d / f"uniform-{u['name']}.gguf").exists():
                sh([lb, "quantize", f32, "-o", d / f"uniform-{u['name']}.gguf", "--type", u["name"], "--pure",
                    "--imatrix", imatrix, "--quiet", "--force", "--threads", t])
            if u:
                rows.append((f"lowbit {u['name']} (uniform, imatrix)", d / f"uniform-{u['name']}.gguf", None, 0.0))
        print(f"\n## mixes vs llama-quantize: KLD by llama-perplexity on {a.chunks} windows of 512 of wiki.test.raw")
        print("| file | tensor MiB | bpw | KLD (llama-perplexity) | PPL | same top-1 | s |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        seen = set()
        for name, path, m, dt in rows:
            if name in seen:
                continue
            seen.add(name)
            r, _ = sh([llb / "llama-perplexity", "-m", path, "-f", WIKI, "-c", 512, "--chunks", a.chunks, *SAME_CACHE,
                       "--kl-divergence-base", base, "--kl-divergence", "-t", t])
            k = parse_kl_divergence(r.stdout + r.stderr)
            tb = tensor_bytes(lb, path)
            params = json.loads(subprocess.run([lb, "inspect", str(f32), "--json", "--quiet"], capture_output=True,
                                               text=True, check=True).stdout)["parameters"]
            print(f"| {name} | {tb / 2**20:.2f} | {8 * tb / params:.3f} | {k['kld']:.6f} +- {k['kld_err']:.6f} | "
                  f"{k['ppl']:.4f} | {k['top1']:.4f} | {dt:.0f} |", flush=True)


if __name__ == "__main__":
    main()

"""Issue 19's decode measurements in one run, printed as the tables of BENCHMARKS.md ("Decode with int8
activations"):

  kld    the int8 decode mode's own cost: `lowbit kld --decode-act int8 --base-exact` (the same quantized model
         computed exactly is the base) on WINDOWS windows of 512 of wiki.test.raw, per spec on SmolLM2 (attention,
         MLP and the tied embedding/head), beside that spec's exact-mode KLD from the model as stored
  kld-gguf  the same on SmolLM2's GGUF files of the gguf section (not in the default sections)
  decode SmolLM2 decode tokens/s, bf16 and each spec exact and in the int8 mode, interleaved (build/bench/bench_decode)
  gguf   lowbit's decode of llama-quantize's GGUF files (Q8_0, Q4_0, Q4_K_M, IQ4_XS; MXFP4 written by lowbit: llama-quantize
         has no dense MXFP4 type) against `llama-bench -p 0 -n 128 -t 2` on the same files, alternated in rounds;
         for SmolLM2 and, with --l8 DIR, a synthetic Llama-3-8B-shaped model of two layers (DIR/{Q8_0,...}.gguf)

usage: .venv/bin/python bench/decode_bench.py LLAMACPP_BIN [--sections kld,decode,gguf] [--windows 40]
       [--specs S,S,...] [--rounds 3] [--l8 DIR] [--build build]
--specs: the kld section's specs (default: int4:g32, mxfp4, nvfp4, int8:channel, int4:g128:affine).
The GGUF files of SmolLM2 are made once from its F32 conversion (gptq_gguf_bench.reference) into the same scratch
folder; timings are noisy on a shared 2-core machine, so every comparison is between runs alternated in one session.
"""
import argparse
import json
import pathlib
import re
import statistics
import subprocess

from gptq_gguf_bench import SMOLLM2, WIKI, reference, sh

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPECS = ["int4:g32", "mxfp4", "nvfp4", "int8:channel", "int4:g128:affine"]
TYPES = ["Q8_0", "Q4_0", "Q4_K_M", "IQ4_XS", "MXFP4"]


def kld_section(lb, windows, d, specs):
    base = d / f"lowbit-base-{windows}.kldb"
    print(f"\n### int8 decode mode: its own KLD (vs the same model exact) and the spec's (vs the model as stored), "
          f"{windows} windows of 512\n")
    print("| spec | KLD int8 vs exact | top-1 agreement | PPL exact | PPL int8 | KLD exact vs stored | KLD int8 vs stored |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s in specs:
        common = [lb, "kld", SMOLLM2, "--text", WIKI, "--chunks", windows, "--spec", s, "--spec-embed", s, "--json",
                  "--quiet"]
        alone = json.loads(sh(common + ["--decode-act", "int8", "--base-exact"])[0].stdout)
        save = ["--base", base] if base.exists() else ["--save-base", base]
        exact = json.loads(sh(common + save)[0].stdout)
        int8 = json.loads(sh(common + ["--base", base, "--decode-act", "int8"])[0].stdout)
        print(f"| {s} | {alone['kld_mean']:.5f} +- {alone['kld_err']:.5f} | {100 * alone['top1_agreement']:.2f}% | "
              f"{alone['ppl_base']:.4f} | {alone['ppl']:.4f} | {exact['kld_mean']:.5f} | {int8['kld_mean']:.5f} |",
              flush=True)


def kld_gguf_section(lb, files, windows):
    print(f"\n### int8 decode mode on GGUF files: its own KLD (vs the same file computed exactly), {windows} windows "
          f"of 512\n")
    print("| file | KLD int8 vs exact | top-1 agreement | PPL exact | PPL int8 |")
    print("|---|---:|---:|---:|---:|")
    for t, f in files.items():
        r = json.loads(sh([lb, "kld", f, "--text", WIKI, "--chunks", windows, "--decode-act", "int8", "--base-exact",
                           "--json", "--quiet"])[0].stdout)
        print(f"| {t} | {r['kld_mean']:.5f} +- {r['kld_err']:.5f} | {100 * r['top1_agreement']:.2f}% | "
              f"{r['ppl_base']:.4f} | {r['ppl']:.4f} |", flush=True)


def bench_decode(bd, model, configs, rounds, tokens=64):
    out = sh([bd, model, "-r", rounds, "-n", tokens, *configs])[0].stdout
    rows = {}
    for line in out.splitlines()[1:]:
        f = line.split()
        rows[f[0]] = (float(f[1]), float(f[2]))
    return rows


def decode_section(bd, rounds):
    configs = ["bf16"] + [c for s in SPECS for c in (s, s + "+int8")]
    rows = bench_decode(bd, SMOLLM2, configs, rounds)
    bf16 = rows["bf16"][1]
    print(f"\n### SmolLM2 decode, {rounds} interleaved rounds of 64 tokens (median tokens/s; best in brackets)\n")
    print("| spec | exact t/s | int8 t/s | int8 / exact | exact vs bf16 | int8 vs bf16 |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| bf16 | {bf16:.1f} ({rows['bf16'][0]:.1f}) | | | 1.00 | |")
    for s in SPECS:
        e, i = rows[s], rows[s + "+int8"]
        print(f"| {s} | {e[1]:.1f} ({e[0]:.1f}) | {i[1]:.1f} ({i[0]:.1f}) | {i[1] / e[1]:.2f} | {e[1] / bf16:.2f} | "
              f"{i[1] / bf16:.2f} |", flush=True)


def llama_bench(llb, model):
    r = sh([llb / "llama-bench", "-m", model, "-p", 0, "-n", 128, "-t", 2, "-o", "json"])[0]
    return json.loads(r.stdout)[0]["avg_ts"]


def gguf_files(lb, llb, d):
    _, f32, _ = reference(lb, llb, 40, 2)
    files = {}
    for t in TYPES:
        out = d / f"decode-{t}.gguf"
        if not out.exists():
            if t == "MXFP4":  # every layer MXFP4, embedding/head Q8_0, as MXFP4_MOE leaves a dense model's rest
                sh([lb, "quantize", f32, "-o", out, "--format", "gguf", "--type", "MXFP4_MOE", "--tensor-type",
                    r"blk\..*=MXFP4", "--quiet"])
            else:
                sh([llb / "llama-quantize", f32, out, t, 2])
        files[t] = out
    return files


def gguf_section(bd, llb, files, rounds, title):
    print(f"\n### {title}: lowbit's decode against llama-bench -p 0 -n 128 -t 2, {rounds} alternated rounds "
          f"(median tokens/s)\n")
    print("| type | MiB | llama-bench | lowbit exact | lowbit int8 | int8 / llama.cpp | int8 mode reaches |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for t, f in files.items():
        ll, ex, i8 = [], [], []
        for _ in range(rounds):
            ll.append(llama_bench(llb, f))
            rows = bench_decode(bd, f, ["stored", "stored+int8"], 3, 128)
            ex.append(rows["stored"][1])
            i8.append(rows["stored+int8"][1])
        reach = {"Q8_0": "all", "Q4_0": "all (Q4_0, Q6_K head in place)", "MXFP4": "all",
                 "Q4_K_M": "all (Q4_K, Q6_K in place)", "IQ4_XS": "all (IQ4_XS, IQ4_NL, Q6_K in place)"}[t]
        l, e, i = statistics.median(ll), statistics.median(ex), statistics.median(i8)
        print(f"| {t} | {f.stat().st_size / 2**20:.1f} | {l:.1f} | {e:.1f} | {i:.1f} | {i / l:.2f} | {reach} |",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("llamacpp_bin", type=pathlib.Path)
    ap.add_argument("--sections", default="kld,decode,gguf")
    ap.add_argument("--windows", type=int, default=40)
    ap.add_argument("--specs", default=",".join(SPECS), help="the kld section's specs (comma-separated)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--l8", type=pathlib.Path)
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    lb, bd = ROOT / a.build / "lowbit", ROOT / a.build / "bench" / "bench_decode"
    # `make all` leaves the bench programs as they were: a stale bench_decode measured old kernels once
    sh(["make", "-s", "-C", ROOT, f"BUILD={a.build}", lb.relative_to(ROOT), bd.relative_to(ROOT)])
    d, _, _ = reference(lb, a.llamacpp_bin, 40, 2)
    sections = a.sections.split(",")
    cpu = re.sub(r"\s+", " ", subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo"], capture_output=True,
                                             text=True).stdout.split(":", 1)[-1]).strip()
    print(f"machine: {cpu}, 2 threads; lowbit {lb}")
    if "kld" in sections:
        kld_section(lb, a.windows, d, a.specs.split(","))
    if "kld-gguf" in sections:
        kld_gguf_section(lb, gguf_files(lb, a.llamacpp_bin, d), a.windows)
    if "decode" in sections:
        decode_section(bd, 9)
    if "gguf" in sections:
        gguf_section(bd, a.llamacpp_bin, gguf_files(lb, a.llamacpp_bin, d), a.rounds, "SmolLM2-135M")
        if a.l8:
            gguf_section(bd, a.llamacpp_bin, {t: a.l8 / f"{t}.gguf" for t in TYPES}, a.rounds,
                         "Llama-3-8B-shaped, two layers (dim 4096, MLP 14336, 32/8 heads of 128, vocab 49152)")


if __name__ == "__main__":
    main()

"""lowbit's GGUF against llama.cpp's own tools, in one run (BENCHMARKS.md, "GGUF").

  speed    time to quantize SmolLM2 (dequantized to F32 first) with lowbit quantize and
           llama-quantize (followed by `sync FILE`: lowbit fsyncs its output before renaming it
           into place, so both times end with the file on disk; the floor likewise), interleaved, at 1 and 2 threads, best of max(--reps, 3); the ratio
           llama-quantize / lowbit; whether the two files are byte-identical; the I/O floor
           (read the input, copy a file of the output's size) that no tool beats; and the
           CPU seconds (user + system) of each, steadier than wall time on a shared machine
  quality  every type (lowbit writes it with llama-quantize's mix): bits per weight, size,
           PPL, KLD and top-1 agreement against the F32 model, each measured by both tools
           on the same file and windows of wiki.test.raw
  run      lowbit ppl on the Q4_K_M file: peak memory vs the file's weight bytes, and
           tokens/s against llama-perplexity on the same windows; lowbit bench's decode and
           prefill tokens/s against llama-bench's tg/pp

usage: .venv/bin/python bench/gguf_bench.py LLAMACPP_BIN [--build build] [--chunks 20] [--reps 2]
       [--sections speed,quality,run]
Needs the SmolLM2 GGUF (.cache/smollm2, made by `make test`) and llama.cpp's tools
(`make llamacpp` prints their folder). Scratch files go to ~/.cache/lowbit/bench-gguf."""
import argparse
import json
import os
import pathlib
import re
import resource
import subprocess
import time

import numpy as np
from gguf import GGUFReader

from llamacpp_kld import parse_kl_divergence

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = ROOT / "data/wikitext-2-raw/wiki.test.raw"
SPEED_TYPES = ["Q8_0", "Q4_0", "Q4_K_M", "Q6_K", "IQ4_XS", "MXFP4_MOE"]
ALL_TYPES = ["F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_1",
             "Q4_0", "IQ4_XS", "IQ4_NL", "MXFP4_MOE", "NVFP4", "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K"]


def sh(args, **kw):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if r.returncode:
        raise SystemExit(f"{args[0]} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def timed(args):
    t = time.perf_counter()
    sh(args)
    return time.perf_counter() - t


def timed_cpu(args):
    """wall seconds and CPU seconds (user + system) of one run: on a shared machine the CPU time is
    the steadier measure of the work done, the wall time what a user waits."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = timed(args)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def weight_stats(path):
    """bits per weight over the 2-D tensors (scales included) and the bytes of all tensors."""
    r = GGUFReader(str(path))
    wbytes = welems = total = 0
    for t in r.tensors:
        total += int(t.n_bytes)
        if len(t.shape) >= 2:
            wbytes += int(t.n_bytes)
            welems += int(np.prod(t.shape))
    return 8 * wbytes / welems, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("llamacpp_bin")
    ap.add_argument("--build", default="build")
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--sections", default="speed,quality,run")
    ap.add_argument("--speed-types", default=",".join(SPEED_TYPES), help="comma-separated types the speed section times")
    a = ap.parse_args()
    lb = str((ROOT / a.build / "lowbit").resolve())
    llb = pathlib.Path(a.llamacpp_bin)
    d = pathlib.Path(os.environ.get("LOWBIT_BENCH_DIR", pathlib.Path.home() / ".cache/lowbit/bench-gguf"))
    d.mkdir(parents=True, exist_ok=True)
    f32 = d / "smollm2-f32.gguf"
    if not f32.exists():
        sh([lb, "convert", SMOLLM2, f32, "--dtype", "f32", "--quiet"])
    gb = f32.stat().st_size / 1e9
    sections = a.sections.split(",")
    print(f"# machine: {os.cpu_count()} CPUs; {sh(['uname', '-srm']).stdout.strip()}; input {f32.name} ({gb:.3f} GB)")

    if "speed" in sections:
        reps = max(a.reps, 3)
        print(f"\n## Quantize SmolLM2 F32: seconds (GB/s of fp32), best of {reps}, interleaved")
        print("floor: reading the input and writing a file of the output's size (cat F32 > /dev/null; cp of "
              "llama-quantize's output), best of the same reps")
        print("| type | threads | llama-quantize s | lowbit s | ratio | identical bytes | floor s | "
              "CPU s llama / lowbit | CPU ratio |")
        print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
        for t in a.speed_types.split(","):
            for th in (1, 2):
                ql, qb, qc = d / f"llama-{t}.gguf", d / f"lowbit-{t}.gguf", d / f"copy-{t}.gguf"
                tl = tb = tf = cl = cb = float("inf")
                for _ in range(reps):  # interleaved: both tools see the same machine state
                    # lowbit fsyncs its output before renaming it into place; llama-quantize does
                    # not, so its run ends with `sync FILE`: both times end with the file on disk
                    w, c = timed_cpu(["sh", "-c", f"'{llb / 'llama-quantize'}' '{f32}' '{ql}' {t} {th} "
                                      f">/dev/null 2>&1 && sync '{ql}'"])
                    tl, cl = min(tl, w), min(cl, c)
                    w, c = timed_cpu([lb, "quantize", f32, "-o", qb, "--format", "gguf", "--type", t,
                                      "--threads", th, "--quiet", "--force"])
                    tb, cb = min(tb, w), min(cb, c)
                    t0 = time.perf_counter()
                    sh(["sh", "-c", f"cat '{f32}' > /dev/null && cp '{ql}' '{qc}' && sync '{qc}'"])
                    tf = min(tf, time.perf_counter() - t0)
                same = ql.read_bytes() == qb.read_bytes()
                print(f"| {t} | {th} | {tl:.2f} ({gb / tl:.3f}) | {tb:.2f} ({gb / tb:.3f}) | {tl / tb:.1f}x | "
                      f"{'yes' if same else 'NO'} | {tf:.2f} | {cl:.2f} / {cb:.2f} | {cl / cb:.1f}x |", flush=True)
                qc.unlink()

    if "quality" in sections:
        lbase, bbase = d / "llama-base.kld", d / f"lowbit-base-{a.chunks}.kldb"
        common = ["-c", 512, "--chunks", a.chunks]
        if not lbase.exists():
            sh([llb / "llama-perplexity", "-m", f32, "-f", WIKI, *common, "--kl-divergence-base", lbase, "-t", 2])
        if not bbase.exists():
            sh([lb, "kld", f32, f32, "--text", WIKI, "--ctx", 512, "--chunks", a.chunks, "--save-base", bbase, "--quiet",
                "--json"])
        print(f"\n## Quality on SmolLM2, {a.chunks} windows of 512 of wiki.test.raw, against the F32 model")
        print("| type | bpw | size MB | PPL llama.cpp | PPL lowbit | KLD llama.cpp | KLD lowbit | top-1 llama.cpp | "
              "top-1 lowbit |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for t in ALL_TYPES:
            q = d / f"lowbit-{t}.gguf"
            sh([lb, "quantize", f32, "-o", q, "--format", "gguf", "--type", t, "--quiet", "--force"])
            bpw, total = weight_stats(q)
            out = sh([llb / "llama-perplexity", "-m", q, "-f", WIKI, *common, "--kl-divergence-base", lbase,
                      "--kl-divergence", "-t", 2])
            k = parse_kl_divergence(out.stdout + out.stderr)
            lp, lk, lt = k["ppl"], k["kld"], k["top1"]
            j = json.loads(sh([lb, "kld", f32, q, "--base", bbase, "--text", WIKI, "--ctx", 512, "--chunks",
                               a.chunks, "--quiet", "--json"]).stdout)
            print(f"| {t} | {bpw:.3f} | {total / 1e6:.1f} | {lp:.4f} | {j['ppl']:.4f} | {lk:.5f} | "
                  f"{j['kld_mean']:.5f} | {lt:.4f} | {j['top1_agreement']:.4f} |", flush=True)

    if "run" in sections:
        q = d / "lowbit-Q4_K_M.gguf"
        if not q.exists():
            sh([lb, "quantize", f32, "-o", q, "--format", "gguf", "--type", "Q4_K_M", "--quiet", "--force"])
        _, total = weight_stats(q)
        chunks = 8
        t0 = time.perf_counter()
        out = sh(["/usr/bin/time", "-v", lb, "ppl", q, "--text", WIKI, "--ctx", 512, "--chunks", chunks, "--json",
                  "--quiet", "--threads", 2])
        tb = time.perf_counter() - t0
        j = json.loads(out.stdout)
        rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr).group(1)) * 1024
        t0 = time.perf_counter()
        out = sh(["/usr/bin/time", "-v", llb / "llama-perplexity", "-m", q, "-f", WIKI, "-c", 512, "--chunks", chunks,
                  "-t", 2])
        tl = time.perf_counter() - t0
        lrss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr).group(1)) * 1024
        mem = j.get("memory", {})
        print(f"\n## lowbit ppl on Q4_K_M ({total / 1e6:.1f} MB of tensors), {chunks} windows of 512, 2 threads")
        print("| tool | wall s | peak RSS MB | RSS / tensor bytes | weights held MB |")
        print("|---|---:|---:|---:|---:|")
        print(f"| lowbit ppl | {tb:.1f} | {rss / 1e6:.0f} | {rss / total:.2f} | "
              f"{mem.get('weights_bytes', 0) / 1e6:.1f} |")
        print(f"| llama-perplexity | {tl:.1f} | {lrss / 1e6:.0f} | {lrss / total:.2f} | |")
        bj = json.loads(sh([lb, "bench", "--model", q, "--threads", 2, "--json", "--quick", "--specs", "fp32",
                             "--decode-specs", "stored", "--kv", "fp32"]).stdout)
        lbench = sh([llb / "llama-bench", "-m", q, "-t", 2, "-p", 512, "-n", 128, "-o", "json"]).stdout
        print("\nlowbit bench (model section):", json.dumps(bj.get("model", bj))[:1500])
        print("llama-bench:", json.dumps([{k: r.get(k) for k in ("n_prompt", "n_gen", "avg_ts")}
                                          for r in json.loads(lbench)]))


if __name__ == "__main__":
    main()

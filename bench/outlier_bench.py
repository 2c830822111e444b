"""Outlier remedies and GPTQ against round-to-nearest, measured by lowbit itself (BENCHMARKS.md,
"Outlier remedies"): for each model and scheme, RTN and each method's (SmoothQuant, AWQ, GPTQ) KLD against the unquantized model,
PPL and bits per weight, on windows of wiki.test.raw; calibration on other text (the WikiText-2
train excerpt for SmolLM2, the TinyStories excerpt for stories260K). Then the time and peak memory
of `lowbit quantize` with each method (calibration, method and writing the checkpoint).

usage: .venv/bin/python bench/outlier_bench.py [--build build] [--chunks 40] [--calib-seqs 128]
       [--calib-len 512] [--models smollm2,stories] [--sections quality,time] [--threads 2]
       [--only WORDS] [--methods rtn,smoothquant,smoothquant:search,awq,gptq,gptq:layerseq,gptq:fileorder,awq+gptq,...]
Needs the SmolLM2 GGUF (.cache/smollm2, made by `make test`). Scratch: ~/.cache/lowbit/bench-outlier."""
import argparse
import json
import os
import pathlib
import re
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
WIKI = ROOT / "data/wikitext-2-raw/wiki.test.raw"
MODELS = {
    "smollm2": (ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                ROOT / "data/wikitext-2-raw/wiki.train.excerpt.raw", None),
    "stories": (ROOT / "models/stories260K.bin", ROOT / "data/tinystories/calib-excerpt.txt",
                ROOT / "models/tok512.bin"),
}
# W8A8 with one static per-tensor int8 scale per input (what SmoothQuant is for), as a recipe
W8A8_STATIC = {"lowbit_recipe": 1, "description": "W8A8-INT8, static per-tensor activation scales",
               "rules": [{"match": "re:model\\.layers\\..*\\.weight", "weights": "int8:channel:scale=bf16",
                          "input_activations": {"spec": "int8:tensor", "mode": "static"}}]}


def sh(args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{args[:3]} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def rows_for(model, group):
    """(label, quantization options, methods): the issue's comparisons."""
    w4 = f"W4A16:g{group}"
    return [
        ("W8A8-INT8 static per-tensor", ["--recipe", "RECIPE"], ["rtn", "smoothquant", "smoothquant:search"]),
        ("W8A8-INT8 dynamic per-token", ["--scheme", "W8A8-INT8"], ["rtn"]),
        (f"{w4} (int4 g{group})", ["--scheme", w4], ["rtn", "awq", "gptq", "gptq:layerseq", "gptq:fileorder",
                                                     "awq+gptq", "awq+gptq:fileorder"]),
        ("NVFP4A16", ["--scheme", "NVFP4A16"], ["rtn", "awq", "gptq"]),
        ("MXFP4A16", ["--scheme", "MXFP4A16"], ["rtn", "awq", "gptq"]),
        (f"{w4}, first and last layers kept", ["--scheme", w4, "--keep", "model.layers.0.*", "--keep",
                                               f"model.layers.{model['last']}.*"], ["rtn"]),
    ]


def method_args(m):
    if m == "rtn":
        return []
    if m == "smoothquant:search":
        return ["--method", "smoothquant", "--alpha", "search"]
    if m.endswith(":fileorder"):  # gptq:fileorder, awq+gptq:fileorder (act order is the default, as llm-compressor's)
        return ["--method", m.split(":")[0], "--no-actorder"]
    if m.endswith(":layerseq"):  # gptq:layerseq: a layer's weights against its unrounded inputs (true-sequential is
        return ["--method", m.split(":")[0], "--no-true-sequential"]  # the default)
    return ["--method", m]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--calib-seqs", type=int, default=128)
    ap.add_argument("--calib-len", type=int, default=512)
    ap.add_argument("--models", default="smollm2,stories")
    ap.add_argument("--sections", default="quality,time")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated words: keep the rows whose scheme label has one")
    ap.add_argument("--methods", default="", help="comma-separated methods (rtn, smoothquant, smoothquant:search, "
                                                  "awq, gptq, gptq:fileorder, awq+gptq, awq+gptq:fileorder): keep only those rows "
                                                  "(both sections)")
    a = ap.parse_args()
    lb = str((ROOT / a.build / "lowbit").resolve())
    d = pathlib.Path(os.environ.get("LOWBIT_BENCH_DIR", pathlib.Path.home() / ".cache/lowbit/bench-outlier"))
    d.mkdir(parents=True, exist_ok=True)
    recipe = d / "w8a8-static.json"
    recipe.write_text(json.dumps(W8A8_STATIC))
    print(f"# machine: {os.cpu_count()} CPUs; {sh(['uname', '-srm']).stdout.strip()}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for name in a.models.split(","):
        path, calib, tok = MODELS[name]
        arch = json.loads(sh([lb, "inspect", path, "--json", "--quiet"]).stdout)["architecture"]
        n_layers, dim = arch["layers"], arch["dim"]
        group = 128 if dim % 128 == 0 else 64 if dim % 64 == 0 else 32
        model = {"last": n_layers - 1}
        tokargs = ["--tokenizer", tok] if tok else []
        calib_args = ["--calib", calib, "--calib-seqs", a.calib_seqs, "--calib-len", a.calib_len]
        base = d / f"{name}-{a.chunks}.kldb"
        if not base.exists():
            sh([lb, "kld", path, path, *tokargs, "--text", WIKI, "--chunks", a.chunks, "--save-base", base,
                "--quiet", "--json", "--threads", a.threads])
        only, picked = [w for w in a.only.split(",") if w], [m for m in a.methods.split(",") if m]

        def wanted(label, m):
            """--only (a word of the scheme label) and --methods, in both sections"""
            return (not only or any(w in label for w in only)) and (not picked or m in picked)

        if "quality" in a.sections:
            print(f"\n## {name}: KLD vs the unquantized model, {a.chunks} windows of 512 of wiki.test.raw; "
                  f"calibration {calib.name}, {a.calib_seqs} x {a.calib_len}")
            print("| scheme | method | KLD | PPL | top-1 | seconds (method + eval) |")
            print("|---|---|---:|---:|---:|---:|")
            for label, qargs, methods in rows_for(model, group):
                qargs = [str(recipe) if x == "RECIPE" else x for x in qargs]
                for m in methods:
                    if not wanted(label, m):
                        continue
                    t0 = time.perf_counter()
                    j = json.loads(sh([lb, "kld", path, *tokargs, "--base", base, "--text", WIKI, "--chunks", a.chunks,
                                       *qargs, *method_args(m), *calib_args, "--quiet", "--json",
                                       "--threads", a.threads]).stdout)
                    dt = time.perf_counter() - t0
                    print(f"| {label} | {m} | {j['kld_mean']:.5f} +- {j['kld_err']:.5f} | "
                          f"{j['ppl']:.4f} | {j['top1_agreement']:.4f} | {dt:.0f} |", flush=True)
        if "time" in a.sections:
            print(f"\n## {name}: lowbit quantize with each method ({a.calib_seqs} x {a.calib_len} calibration tokens, "
                  f"{a.threads} threads): wall seconds and peak RSS, the checkpoint written")
            print("| scheme | method | wall s | CPU s | peak RSS MB |")
            print("|---|---|---:|---:|---:|")
            w8a8 = ("W8A8-INT8 static", ["--recipe", str(recipe)])
            w4 = (f"W4A16:g{group}", ["--scheme", f"W4A16:g{group}"])
            timed = [(*w8a8, m) for m in ("rtn", "smoothquant", "smoothquant:search")] + \
                    [(*w4, m) for m in ("awq", "gptq", "gptq:fileorder", "awq+gptq", "rtn")] + \
                    [(s, ["--scheme", s], "gptq") for s in ("NVFP4A16", "MXFP4A16")]
            for label, qargs, m in timed:
                if not wanted(label, m):
                    continue
                out = d / f"{name}-{m.replace(':', '-').replace('+', '-')}-ckpt"
                r = sh(["/usr/bin/time", "-v", lb, "quantize", path, "-o", out, *qargs, *method_args(m),
                        *calib_args, "--quiet", "--force", "--threads", a.threads])
                wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", r.stderr).group(1)
                secs = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall.split(":"))))
                rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) / 1024
                cpu = sum(float(re.search(rf"{k} time \(seconds\): (\S+)", r.stderr).group(1)) for k in ("User", "System"))
                print(f"| {label} | {m} | {secs:.1f} | {cpu:.1f} | {rss:.0f} |", flush=True)


if __name__ == "__main__":
    main()

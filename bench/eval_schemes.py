"""Benchmark accuracy of the quantize schemes on SmolLM2, base vs quantized
with lowbit eval's paired verdict: HellaSwag (acc_norm) and LAMBADA
(OpenAI, acc) on the first N items of each (data/evals), the base scored
once (--items, then --base-items for every scheme). AWQ and GPTQ calibrate
on the WikiText-2 train excerpt (128 x 512 tokens, the default).

usage: .venv/bin/python bench/eval_schemes.py [--limit 2000] [--threads 2] [--only WORD,...]
Prints a markdown table (BENCHMARKS.md, "Benchmark accuracy")."""
import argparse
import json
import os
import pathlib
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
HS = ROOT / "data/evals/hellaswag/hellaswag_val_full.txt"
LAMBADA = ROOT / "data/evals/lambada/lambada_test.jsonl"
CALIB = ROOT / "data/wikitext-2-raw/wiki.train.excerpt.raw"

ROWS = [
    ("W8A8-FP8", "rtn", ["--scheme", "W8A8-FP8"]),
    ("W8A8-INT8", "rtn", ["--scheme", "W8A8-INT8"]),
    ("W4A16:g64", "rtn", ["--scheme", "W4A16:g64"]),
    ("W4A16:g64", "awq", ["--scheme", "W4A16:g64", "--method", "awq", "--calib", str(CALIB)]),
    ("W4A16:g64", "gptq --actorder", ["--scheme", "W4A16:g64", "--method", "gptq", "--actorder", "--calib", str(CALIB)]),
    ("NVFP4A16", "rtn", ["--scheme", "NVFP4A16"]),
    ("MXFP4A16", "rtn", ["--scheme", "MXFP4A16"]),
]


def run(args):
    p = subprocess.run([str(ROOT / "build/lowbit"), *map(str, args)], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(p.stderr[-3000:])
    return json.loads(p.stdout)


def cell(task):
    p = task["paired"][task["headline"]]
    return (f"{100 * task['quant'][task['headline']]:.2f} "
            f"({100 * p['diff']:+.2f}, CI [{100 * p['ci_lo']:+.2f}, {100 * p['ci_hi']:+.2f}], p {p['p_mcnemar']:.3g}) "
            f"{task['verdict']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    d = pathlib.Path(os.environ.get("LOWBIT_BENCH_DIR", pathlib.Path.home() / ".cache/lowbit/bench-eval"))
    d.mkdir(parents=True, exist_ok=True)
    tasks = ["--task", "hellaswag", "--data", HS, "--task", "lambada", "--data", LAMBADA, "--limit", a.limit,
             "--threads", a.threads, "--quiet", "--json"]
    base_items = d / f"base-{a.limit}.jsonl"
    if not base_items.exists():
        t0 = time.perf_counter()
        base = run(["eval", SMOLLM2, *tasks, "--items", str(base_items) + ".part"])
        os.replace(str(base_items) + ".part", base_items)
        hs, lam = base["tasks"]
        print(f"# base scored in {time.perf_counter() - t0:.0f} s: HellaSwag acc_norm {100 * hs['base']['acc_norm']:.2f}, "
              f"LAMBADA acc {100 * lam['base']['acc']:.2f} (ppl {lam['base']['ppl']:.2f})")
    print(f"# machine: {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"first {a.limit} items of each task")
    print("| scheme | method | HellaSwag acc_norm (diff, 95% CI, McNemar p) verdict | "
          "LAMBADA acc (diff, 95% CI, McNemar p) verdict | LAMBADA ppl | seconds |")
    print("|---|---|---|---|---:|---:|")
    only = [w for w in a.only.split(",") if w]
    for label, method, qargs in ROWS:
        if only and not any(w in f"{label} {method}" for w in only):
            continue
        t0 = time.perf_counter()
        out = run(["eval", SMOLLM2, *tasks, *qargs, "--base-items", base_items])
        hs, lam = out["tasks"]
        print(f"| {label} | {method} | {cell(hs)} | {cell(lam)} | {lam['base']['ppl']:.2f} -> {lam['quant']['ppl']:.2f} | "
              f"{time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    main()

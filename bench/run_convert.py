"""Runs the bulk-conversion benchmark and prints BENCHMARKS.md's table.

usage: python bench/run_convert.py BUILD_DIR [--gib 1.0] [--reps 3]

1. writes --gib GiB of fp32 values (normal, sigma 1: a weight-like spread
   that exercises every exponent an 8-bit format has) to a temp file;
2. times numpy + ml_dtypes `astype` on those values, both directions;
3. runs BUILD_DIR/bench/bench_convert on the same file (memcpy baseline,
   lowbit at 1 and 2 threads);
4. prints a markdown table: GB/s of fp32 data, ratio to memcpy at the same
   thread count, and ratio to ml_dtypes (single-threaded, as numpy is)."""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import ml_dtypes as md
import numpy as np

TYPES = {"bf16": md.bfloat16, "fp16": np.float16, "fp8_e4m3": md.float8_e4m3fn,
         "fp8_e5m2": md.float8_e5m2, "fp4_e2m1": md.float4_e2m1fn}


def best(fn, reps):
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    n = int(a.gib * (1 << 30)) // 4
    rng = np.random.default_rng(0)
    x = np.empty(n, dtype=np.float32)
    step = 1 << 24
    for i in range(0, n, step):
        x[i:i + step] = rng.standard_normal(min(step, n - i), dtype=np.float32)
    fd, path = tempfile.mkstemp(suffix=".f32")
    os.close(fd)
    try:
        x.tofile(path)
        ref = {}
        for name, t in TYPES.items():
            y = x.astype(t)  # warm-up, and the input of the decode timing
            out = np.empty(n, dtype=np.float32)
            enc = best(lambda: x.astype(t), a.reps)
            dec = best(lambda: np.copyto(out, y, casting="unsafe"), a.reps)
            ref[name] = (n * 4 / enc / 1e9, n * 4 / dec / 1e9)
            del y, out
            print(f"ml_dtypes {name}: encode {ref[name][0]:.3f} GB/s, decode {ref[name][1]:.3f} GB/s",
                  file=sys.stderr)
        del x
        proc = subprocess.run([os.path.join(a.build, "bench", "bench_convert"), path, str(a.reps)],
                              capture_output=True, text=True, check=True)
    finally:
        os.unlink(path)
    rows = [json.loads(l) for l in proc.stdout.splitlines()]
    memcpy = {r["threads"]: r["gbps"] for r in rows if r["op"] == "memcpy"}
    isa = next(r["isa"] for r in rows if r["op"] != "memcpy")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"Data: {n * 4 / 2**30:.2f} GiB of fp32 (N(0,1)), best of {a.reps}; lowbit kernels: {isa}; "
          f"CPU: {cpu}, {os.cpu_count()} cores; numpy {np.__version__}, ml_dtypes {md.__version__}; "
          f"{platform.python_implementation()} {platform.python_version()}.")
    print()
    print(f"memcpy: {memcpy[1]:.2f} GB/s (1 thread), {memcpy[2]:.2f} GB/s (2 threads)")
    print()
    print("| conversion | threads | lowbit GB/s | × memcpy | ml_dtypes GB/s | × ml_dtypes |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["op"] == "memcpy":
            continue
        arrow = f"fp32 → {r['format']}" if r["op"] == "encode" else f"{r['format']} → fp32"
        if r["format"] == "fp4_e2m1" and r["op"] == "encode":
            arrow += " (packed)"
        mref = ref[r["format"]][0 if r["op"] == "encode" else 1]
        print(f"| {arrow} | {r['threads']} | {r['gbps']:.2f} | {r['gbps'] / memcpy[r['threads']]:.2f} | "
              f"{mref:.3f} | {r['gbps'] / mref:.1f} |")


if __name__ == "__main__":
    main()

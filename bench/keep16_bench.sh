#!/bin/sh
# 16-bit outliers on SmolLM2 (README, "Keeping outliers in 16-bit"): KLD, top-1, PPL and bits per weight of
# round-to-nearest, the first and last layers kept (--keep), --keep-sensitive 2 and LLM.int8() outlier
# columns (--outlier-threshold 6), for W4A16 (int4 g128) and W8A8-INT8; lowbit kld on 40 windows of 512 of
# wiki.test.raw, calibration on the WikiText-2 train excerpt (8 windows of 512). Prints a Markdown table.
#
# usage: bench/keep16_bench.sh [BUILD_DIR]
# environment: LOWBIT_BENCH_DIR scratch (default ~/.cache/lowbit/bench-keep16; the base distributions take
#   1 GB there), LOWBIT_BENCH_CHUNKS windows (default 40), LOWBIT_BENCH_THREADS (default 2).
# Needs the SmolLM2 GGUF (.cache/smollm2, made by `make test`) and /usr/bin/time.
set -e
build=${1:-build}
lowbit=$(cd "$build" && pwd)/lowbit
top=$(pwd)
B=${LOWBIT_BENCH_DIR:-$HOME/.cache/lowbit/bench-keep16}
chunks=${LOWBIT_BENCH_CHUNKS:-40}
threads=${LOWBIT_BENCH_THREADS:-2}
M=$top/.cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
E=$top/data/wikitext-2-raw/wiki.test.raw
C=$top/data/wikitext-2-raw/wiki.train.excerpt.raw
mkdir -p "$B"
cd "$B"
run() {
    name=$1
    shift
    /usr/bin/time -v "$lowbit" kld "$M" --text "$E" --chunks "$chunks" --threads "$threads" --json --quiet "$@" \
        > "$name.json" 2> "$name.err"
}
run w4_rtn --scheme W4A16 --save-base base.kld --force
run w4_keep_first_last --scheme W4A16 --keep 'model.layers.0.*' --keep 'model.layers.29.*' --base base.kld
run w4_keep_sensitive2 --scheme W4A16 --keep-sensitive 2 --calib "$C" --base base.kld
run w4_outliers6 --scheme W4A16 --outlier-threshold 6 --calib "$C" --base base.kld
run w8_rtn --scheme W8A8-INT8 --base base.kld
run w8_keep_sensitive2 --scheme W8A8-INT8 --keep-sensitive 2 --calib "$C" --base base.kld
run w8_outliers6 --scheme W8A8-INT8 --outlier-threshold 6 --calib "$C" --base base.kld
rm -f base.kld
python3 - <<'PY'
import json
rows = ["w4_rtn", "w4_keep_first_last", "w4_keep_sensitive2", "w4_outliers6", "w8_rtn", "w8_keep_sensitive2",
        "w8_outliers6"]
print("| run | KLD | top-1 | PPL | bits/weight (layers) | bits/weight (all) | outlier columns | kept (ranking s) |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    d = json.load(open(f"{r}.json"))
    s = d.get("sensitivity")
    kept = ", ".join(str(e["layer"]) for e in s["layers"] if e["kept"]) + f" ({s['seconds']:.0f} s)" if s else ""
    print(f"| {r} | {d['kld_mean']:.4f} ± {d['kld_err']:.4f} | {100 * d['top1_agreement']:.1f}% | {d['ppl']:.2f} | "
          f"{d['layer_bits_per_weight']:.3f} | {d['bits_per_weight']:.3f} | {d['outlier_columns']} | {kept} |")
PY

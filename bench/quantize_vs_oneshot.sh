#!/bin/sh
# lowbit quantize vs llm-compressor's oneshot on the RTN schemes, interleaved (one lowbit run, then one
# oneshot run of the same preset, per scheme) so that both see the same machine state: the ratio is the
# number to read. Input: the bf16 SmolLM2 directory `make bench-quantize` writes. Each time is the whole
# process as a user sees it (/usr/bin/time: wall and peak RSS; oneshot's includes importing torch).
# usage: bench/quantize_vs_oneshot.sh [BUILD_DIR]   (after `make bench-quantize` has made its inputs)
set -e
B=${LOWBIT_BENCH_DIR:-$HOME/.cache/lowbit/bench}; SMOL=$B/smollm2-bf16; LB=$(cd "${1:-build}" && pwd)/lowbit
LPY=$(sh bench/llmc_env.sh)
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
for row in "W8A8-INT8|W8A8|0" "W4A16:g32|W4A16|32" "W8A8-FP8|FP8_DYNAMIC|0" "NVFP4A16|NVFP4A16|0"; do
  s=${row%%|*}; r=${row#*|}; p=${r%%|*}; g=${r##*|}; t=$(echo $s | tr : _)
  rm -rf $T/lb-$t $T/llmc-$t
  /usr/bin/time -f "lowbit $s wall %e s rss %M KB" $LB quantize $SMOL -o $T/lb-$t --scheme $s --quiet 2>&1 | tail -1
  ex=; [ $g = 0 ] || ex="--group $g"
  /usr/bin/time -f "oneshot $p wall %e s rss %M KB" $LPY bench/llmc_oneshot.py $SMOL $T/llmc-$t $p $ex 2>&1 | tail -1
  uptime
done

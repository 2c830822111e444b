#!/bin/sh
# make bench: every benchmark, printed as BENCHMARKS.md tables.
# usage: bench/run.sh BUILD_DIR PYTHON
set -e
build=${1:-build}
python=${2:-python3}
echo "## Bulk conversion"
echo
echo "Command: \`make bench\` (runs \`$python bench/run_convert.py $build --gib ${LOWBIT_BENCH_GIB:-1}\`)"
echo
"$python" bench/run_convert.py "$build" --gib "${LOWBIT_BENCH_GIB:-1}"
echo
echo "## Tensor quantization"
echo
echo "Command: \`make bench\` (runs \`$build/bench/bench_quant ${LOWBIT_BENCH_GIB:-1}\`)"
echo
"$build/bench/bench_quant" "${LOWBIT_BENCH_GIB:-1}"
echo
echo "## Model files"
echo
echo "Command: \`make bench\` (runs \`$python bench/run_models.py $build\`)"
echo
"$python" bench/run_models.py "$build"
echo
echo "## Evaluation"
echo
echo "Command: \`make bench\` (runs \`$python bench/run_eval.py $build\`)"
echo
"$python" bench/run_eval.py "$build"
echo
echo "## Packed kernels, W8A8, KV cache"
echo
echo "Command: \`make bench\` (runs \`$build/lowbit bench\`)"
echo
echo '```'
"$build/lowbit" bench
echo '```'

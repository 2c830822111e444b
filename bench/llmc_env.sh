#!/bin/sh
# Creates (once, cached) the llm-compressor baseline environment for `make bench-quantize`.
# Its own venv: llm-compressor pins torch <= 2.14, transformers <= 5.17 and compressed-tensors 0.19,
# which conflict with the interop test environment (torch 2.15, transformers 5.24, CT 0.20.1).
# PyPI's torch is the CUDA build; it imports and runs on this CPU-only machine.
# usage: bench/llmc_env.sh        prints the venv's python on stdout
set -e
ver=0.14.0.1
dir=${LOWBIT_LLMC_VENV:-$HOME/.cache/lowbit/llmc-$ver}
if [ ! -f "$dir/.ready" ]; then
    echo "llmc_env: creating $dir (llmcompressor==$ver, torch from PyPI: several GB, minutes)" >&2
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q "llmcompressor==$ver" psutil >&2
    "$dir/bin/python" -c "import llmcompressor, torch, compressed_tensors" >&2
    touch "$dir/.ready"
fi
echo "$dir/bin/python"

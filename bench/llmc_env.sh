#!/bin/sh
# Creates (once, cached) the llm-compressor baseline environment for `make bench-quantize`: the same one
# `make bench-llmcompressor` uses, ~/.cache/lowbit/llmc-<hash of bench/llmcompressor/requirements.txt>
# (that file pins llmcompressor 0.14.0.1 and its whole tree; it says why it is a separate environment).
# usage: bench/llmc_env.sh        prints the venv's python on stdout (run from the repository root)
set -e
req=bench/llmcompressor/requirements.txt
dir=${LOWBIT_LLMC_VENV:-$HOME/.cache/lowbit/llmc-$(sha256sum "$req" | cut -c1-12)}
if [ ! -f "$dir/.ready" ]; then
    echo "llmc_env: creating $dir (torch from PyPI: several GB, minutes)" >&2
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
    "$dir/bin/python" -c "import llmcompressor, torch, compressed_tensors" >&2
    touch "$dir/.ready"
fi
echo "$dir/bin/python"

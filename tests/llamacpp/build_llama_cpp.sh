#!/bin/sh
# Build llama.cpp's reference tools (llama-quantize, llama-perplexity,
# llama-imatrix, llama-bench, llama-tokenize) and its shared libraries from
# the llama.cpp vendored in the llama-cpp-python source distribution on PyPI,
# pinned by hash. The build lives outside the clone, keyed by that hash, so a
# second run is instant and a fresh machine still works (about 20 minutes on
# 2 cores).
#
# usage: build_llama_cpp.sh PYTHON [CACHE_ROOT]   prints the bin directory
set -eu
python=${1:?usage: build_llama_cpp.sh PYTHON [CACHE_ROOT]}
root=${2:-$HOME/.cache/lowbit}
version=0.3.36
sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
dir=$root/llama.cpp-$(echo $sha | cut -c1-12)
if [ -f "$dir/.ready" ]; then echo "$dir/build/bin"; exit 0; fi

mkdir -p "$dir"
tarball=$dir/llama_cpp_python-$version.tar.gz
if [ ! -f "$tarball" ]; then
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        "llama-cpp-python==$version" -d "$dir" >&2
fi
echo "$sha  $tarball" | sha256sum -c --quiet - >&2 || { echo "checksum mismatch: $tarball" >&2; exit 1; }
rm -rf "$dir/src" && mkdir -p "$dir/src"
tar xzf "$tarball" -C "$dir/src" --strip-components=3 "llama_cpp_python-$version/vendor/llama.cpp"

# Shared libraries so the tests can also call ggml's reference quantizers
# (ggml_quantize_chunk) through ctypes on random data; the tools find them
# by RPATH inside the build folder. Release, CPU only, no network code.
cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DGGML_OPENMP=OFF >&2
cmake --build "$dir/build" -j "$(nproc)" --target llama-quantize llama-perplexity llama-imatrix \
    llama-bench llama-tokenize >&2
touch "$dir/.ready"
echo "$dir/build/bin"

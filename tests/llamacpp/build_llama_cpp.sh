#!/bin/sh
# Build llama.cpp's reference tools (llama-quantize, llama-perplexity,
# llama-imatrix, llama-bench, llama-tokenize) and its shared libraries from
# the llama.cpp vendored in the llama-cpp-python source distribution on PyPI,
# pinned by hash. The build lives outside the clone, keyed by that hash, so a
# second run is instant and a fresh machine still works (about 20 minutes on
# 2 cores).
#
# The tools are built for this CPU (ggml's default -march=native: the fair
# anchor for speed comparisons), so the cache is keyed by the CPU's flags as
# well: a build made on another machine is never reused, where it would die
# of an illegal instruction. AMX is left out: these virtual machines report
# amx_tile in cpuid but fault on its first tile instruction (seen: SIGILL in
# ggml's AMX matmul during llama-perplexity).
#
# usage: build_llama_cpp.sh PYTHON [CACHE_ROOT]   prints the bin directory
set -eu
python=${1:?usage: build_llama_cpp.sh PYTHON [CACHE_ROOT]}
root=${2:-$HOME/.cache/lowbit}
version=0.3.36
sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cpu=$( (grep -m1 '^flags' /proc/cpuinfo; echo "$noamx") | sha256sum | cut -c1-8)
dir=$root/llama.cpp-$(echo $sha | cut -c1-12)-$cpu
if [ -f "$dir/.ready" ]; then echo "$dir/build/bin"; exit 0; fi

mkdir -p "$dir"
tarball=$dir/llama_cpp_python-$version.tar.gz
if [ ! -f "$tarball" ]; then
    # the sdist from an earlier build for another CPU, if one is here
    for old in "$root"/llama.cpp-"$(echo $sha | cut -c1-12)"*/llama_cpp_python-$version.tar.gz; do
        [ -f "$old" ] && [ "$old" != "$tarball" ] && cp "$old" "$tarball" && break
    done
fi
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
    -DLLAMA_BUILD_SERVER=OFF -DGGML_OPENMP=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
    -DGGML_AMX_BF16=OFF -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" >&2
cmake --build "$dir/build" -j "$(nproc)" --target llama-quantize llama-perplexity llama-imatrix \
    llama-bench llama-tokenize >&2
touch "$dir/.ready"
echo "$dir/build/bin"

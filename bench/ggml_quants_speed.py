"""Single-thread speed of lowbit's ggml quantizers (src/io/ggml_quants_k.c)
against libggml-base's ggml_quantize_chunk, in one process on the same
data (SmolLM2-like gaussian rows of 4096), with and without an importance
matrix; also checks the bytes are equal.

  LOWBIT_LLAMACPP=~/.cache/lowbit/llama.cpp-832db0699007/build/bin \\
  LOWBIT_BUILD=build .venv/bin/python bench/ggml_quants_speed.py [type ...]

Prints MB/s of fp32 input per thread (thread CPU time, best of 7: the
machine may be shared) for both and the ratio."""
import ctypes
import os
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "llamacpp"))

import internal_lib  # noqa: E402
from test_ggml_quants_k import FP, TYPES, fptr  # noqa: E402


def best_time(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return best


def main():
    ggml = ctypes.CDLL(str(pathlib.Path(os.environ["LOWBIT_LLAMACPP"]) / "libggml-base.so"))
    ggml.ggml_quantize_chunk.restype = ctypes.c_size_t
    ggml.ggml_quantize_chunk.argtypes = [ctypes.c_int, FP, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                         ctypes.c_int64, FP]
    lib = internal_lib.load()
    rows, cols = 64, 4096
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    im = np.exp(rng.standard_normal(cols)).astype(np.float32)
    mb = x.nbytes / 1e6
    names = sys.argv[1:] or list(TYPES)
    print(f"{'type':6} {'imatrix':7} {'ggml MB/s':>10} {'lowbit MB/s':>12} {'ratio':>6}  bytes")
    for t in names:
        tid, blk, nbytes, name, needs_im = TYPES[t]
        fn = getattr(lib, name)
        fn.restype = None
        fn.argtypes = [FP, ctypes.c_void_p, ctypes.c_size_t, FP]
        for imx in ([im] if needs_im else [None, im]):
            want = np.zeros((rows, cols // blk * nbytes), np.uint8)
            got = np.zeros_like(want)
            xp, ip = fptr(x), fptr(imx)

            def run_ggml():
                ggml.ggml_quantize_chunk(tid, xp, want.ctypes.data, 0, rows, cols, ip)

            def run_lowbit():
                for r in range(rows):
                    fn(fptr(x[r]), got[r].ctypes.data, cols, ip)

            tg = best_time(run_ggml, 7)
            tl = best_time(run_lowbit, 7)
            same = "equal" if np.array_equal(want, got) else "DIFFER"
            print(f"{t:6} {'yes' if imx is not None else 'no':7} {mb / tg:10.1f} {mb / tl:12.1f} {tg / tl:6.2f}  {same}")


if __name__ == "__main__":
    main()

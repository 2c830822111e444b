"""Speed of lowbit's ggml quantizers against libggml's ggml_quantize_chunk:
MB/s of fp32 input on one thread, same process, same data (gaussian rows
of 4096), best of several interleaved runs over preallocated buffers, and
the bytes compared.

  LOWBIT_LLAMACPP=~/.cache/lowbit/llama.cpp-832db0699007/build/bin LOWBIT_BUILD=build \\
      .venv/bin/python tests/llamacpp/bench_ggml_quants.py [type ...]"""
import os
import sys
import time

import numpy as np

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as G

from ggml_oracle import LB_OK, Ggml, Lowbit

TYPES = ["f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "mxfp4", "nvfp4", "iq4_nl", "iq4_xs"]
IMATRIX = {"iq4_nl", "iq4_xs"}


def best_time(fn, reps):
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def runners(ggml, lowbit, name, x, imatrix):
    """Two no-argument calls over preallocated buffers (no Python work timed but the call)."""
    rows, cols = x.shape
    block, nbytes = GGML_QUANT_SIZES[G[name.upper()]]
    out_lb, out_gg = (np.zeros(rows * cols // block * nbytes, np.uint8) for _ in range(2))
    im = None if imatrix is None else imatrix.ctypes.data
    t, xp = lowbit.dtype(name), x.ctypes.data
    f_lb, f_gg, g = lowbit.lib.lb__ggml_quantize_rows, ggml.dll.ggml_quantize_chunk, int(G[name.upper()])
    return (lambda: f_lb(t, xp, rows, cols, im, out_lb.ctypes.data), out_lb,
            lambda: f_gg(g, xp, out_gg.ctypes.data, 0, rows, cols, im), out_gg)


def main(types):
    ggml, lowbit = Ggml(os.environ["LOWBIT_LLAMACPP"]), Lowbit()
    rng = np.random.default_rng(1)
    print(f"{'type':10} {'lowbit MB/s':>12} {'ggml MB/s':>10} {'ratio':>6}  bytes")
    for name in types:
        slow = name.startswith("iq4")
        x = rng.standard_normal((16 if slow else 256, 4096)).astype(np.float32)
        im = rng.uniform(0.1, 1.0, 4096).astype(np.float32)
        mb = x.nbytes / 1e6
        for imatrix in ([None, im] if name in IMATRIX else [None]):
            run_lb, got, run_gg, want = runners(ggml, lowbit, name, x, imatrix)
            assert run_lb() == LB_OK, lowbit.error()
            run_gg()
            t_lb = t_gg = float("inf")
            for _ in range(3):  # interleaved: the machine is shared
                t_lb = min(t_lb, best_time(run_lb, 5))
                t_gg = min(t_gg, best_time(run_gg, 5))
            label = name + (" +im" if imatrix is not None else "")
            print(f"{label:10} {mb / t_lb:12.1f} {mb / t_gg:10.1f} {t_gg / t_lb:6.2f}  "
                  f"{'equal' if (got == want).all() else 'DIFFER'}")


if __name__ == "__main__":
    main(sys.argv[1:] or TYPES)

"""lowbit's K-quant quantizers and importance-weighted classic quantizers
(src/io/ggml_quants_k.c) against libggml-base's ggml_quantize_chunk, the
pinned llama.cpp's own code: the bytes must be equal, row for row, on
gaussian, heavy-tailed, sparse, constant, tiny and huge rows and on real
SmolLM2 weights, each without an importance matrix and with random ones
(one holding zeros)."""
import ctypes
import functools
import pathlib
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

import internal_lib  # noqa: E402

# ggml type id, block elements, block bytes, lowbit function, needs imatrix
TYPES = {
    "q2_k": (10, 256, 84, "lb__ggml_quantize_row_q2_k", False),
    "q3_k": (11, 256, 110, "lb__ggml_quantize_row_q3_k", False),
    "q4_k": (12, 256, 144, "lb__ggml_quantize_row_q4_k", False),
    "q5_k": (13, 256, 176, "lb__ggml_quantize_row_q5_k", False),
    "q6_k": (14, 256, 210, "lb__ggml_quantize_row_q6_k", False),
    "q4_0": (2, 32, 18, "lb__ggml_quantize_row_q4_0_imatrix", True),
    "q4_1": (3, 32, 20, "lb__ggml_quantize_row_q4_1_imatrix", True),
    "q5_0": (6, 32, 22, "lb__ggml_quantize_row_q5_0_imatrix", True),
    "q5_1": (7, 32, 24, "lb__ggml_quantize_row_q5_1_imatrix", True),
}

FP = ctypes.POINTER(ctypes.c_float)


@pytest.fixture(scope="module")
def ggml(llamacpp_bin):
    lib = ctypes.CDLL(str(llamacpp_bin / "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, FP, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_int64, FP]
    return lib


@pytest.fixture(scope="module")
def lowbit():
    lib = internal_lib.load()
    for _, _, _, name, _ in TYPES.values():
        fn = getattr(lib, name)
        fn.restype = None
        fn.argtypes = [FP, ctypes.c_void_p, ctypes.c_size_t, FP]
    return lib


def fptr(a):
    return None if a is None else a.ctypes.data_as(FP)


def quantize_ggml(ggml, t, x, imatrix):
    tid, blk, nbytes, _, _ = TYPES[t]
    rows, cols = x.shape
    out = np.zeros(rows * cols // blk * nbytes, np.uint8)
    n = ggml.ggml_quantize_chunk(tid, fptr(x), out.ctypes.data, 0, rows, cols, fptr(imatrix))
    assert n == out.size
    return out.reshape(rows, -1)


def quantize_lowbit(lowbit, t, x, imatrix):
    _, blk, nbytes, name, _ = TYPES[t]
    rows, cols = x.shape
    out = np.zeros((rows, cols // blk * nbytes), np.uint8)
    fn = getattr(lowbit, name)
    for r in range(rows):
        fn(fptr(x[r]), out[r].ctypes.data, cols, fptr(imatrix))
    return out


def check(ggml, lowbit, t, x, imatrix, what):
    x = np.ascontiguousarray(x, np.float32)
    if imatrix is not None:
        imatrix = np.ascontiguousarray(imatrix, np.float32)
    want = quantize_ggml(ggml, t, x, imatrix)
    got = quantize_lowbit(lowbit, t, x, imatrix)
    bad = np.nonzero((want != got).any(axis=1))[0]
    assert bad.size == 0, (f"{t} {what} imatrix={'yes' if imatrix is not None else 'no'}: "
                           f"{bad.size}/{x.shape[0]} rows differ, first row {bad[0]} "
                           f"at bytes {np.nonzero(want[bad[0]] != got[bad[0]])[0][:8]}")


def synthetic_rows(rng, cols):
    """(name, rows x cols) test matrices covering the numeric corners."""
    g = rng.standard_normal((24, cols)).astype(np.float32)
    t = rng.standard_t(2.0, (24, cols)).astype(np.float32)
    sparse = rng.standard_normal((16, cols)).astype(np.float32)
    sparse[rng.random(sparse.shape) < 0.7] = 0
    zero_blocks = rng.standard_normal((8, cols)).astype(np.float32)
    zero_blocks[:, : cols // 2] = 0
    zero_blocks[0] = 0
    const = np.repeat(rng.standard_normal((6, 1)).astype(np.float32), cols, axis=1)
    const[0] = 0
    const[1] = 1
    const[2] = -3.5
    positive = np.abs(rng.standard_normal((8, cols))).astype(np.float32) + 0.5
    negative = -np.abs(rng.standard_normal((8, cols))).astype(np.float32)
    tiny = (rng.standard_normal((8, cols)) * 1e-6).astype(np.float32)
    tinier = (rng.standard_normal((8, cols)) * 1e-20).astype(np.float32)
    huge = (rng.standard_normal((8, cols)) * 1e4).astype(np.float32)
    outlier = rng.standard_normal((8, cols)).astype(np.float32)
    outlier[np.arange(8), rng.integers(0, cols, 8)] = 300.0
    grid = (rng.integers(-8, 8, (8, cols)) * 0.25).astype(np.float32)  # ties in the rounding
    subnormal = (rng.standard_normal((4, cols)) * 1e-39).astype(np.float32)
    sign_tie = rng.standard_normal((4, cols)).astype(np.float32)  # +a and -a both the largest magnitude
    sign_tie[:, ::16] = 5.0
    sign_tie[:, 1::16] = -5.0
    one_off = np.full((4, cols), 0.5, np.float32)  # flat sub-blocks but for one value
    one_off[:, ::16] = -2.0
    return [("subnormal", subnormal), ("sign-tie", sign_tie), ("one-off", one_off), ("gaussian", g), ("student-t", t), ("sparse", sparse), ("zero-blocks", zero_blocks),
            ("constant", const), ("positive", positive), ("negative", negative), ("tiny", tiny),
            ("tinier", tinier), ("huge", huge), ("outlier", outlier), ("grid", grid)]


def imatrices(rng, cols):
    a = rng.random(cols).astype(np.float32) * 10 + 1e-3
    b = np.exp(rng.standard_normal(cols) * 2).astype(np.float32)
    c = a.copy()
    c[rng.random(cols) < 0.2] = 0
    c[:32] = 0
    return [("uniform", a), ("lognormal", b), ("zeros", c)]


@pytest.mark.parametrize("t", list(TYPES))
def test_synthetic_rows_match_ggml(ggml, lowbit, t):
    rng = np.random.default_rng(sum(map(ord, t)))
    cols = 1024
    for what, x in synthetic_rows(rng, cols):
        if not TYPES[t][4]:
            check(ggml, lowbit, t, x, None, what)
        for iname, im in imatrices(rng, cols):
            check(ggml, lowbit, t, x, im, f"{what}/{iname}")


@functools.lru_cache(maxsize=1)
def smollm2_weights():
    """A few real weight matrices of SmolLM2, dequantized to fp32, their
    values laid out in rows of 2304 (9 super-blocks: SmolLM2's 576 and 1536
    are not all multiples of 256)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    path = next((ROOT / ".cache" / "smollm2").glob("*.gguf"), None)
    if path is None:
        pytest.skip("no SmolLM2 GGUF in .cache/smollm2")
    reader = GGUFReader(path)
    out = []
    for t in reader.tensors:
        if t.name in ("blk.0.attn_q.weight", "blk.3.ffn_down.weight", "blk.7.attn_v.weight", "blk.11.ffn_gate.weight"):
            w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
            out.append((t.name, w[: 48 * 2304].reshape(48, 2304)))
    assert out
    return out


@pytest.mark.parametrize("t", list(TYPES))
def test_smollm2_weights_match_ggml(ggml, lowbit, t):
    rng = np.random.default_rng(7)
    for name, w in smollm2_weights():
        cols = w.shape[1]
        if not TYPES[t][4]:
            check(ggml, lowbit, t, w, None, name)
        # an activation-like importance: a few channels dominate
        im = (rng.standard_normal(cols) ** 2 * np.exp(rng.standard_normal(cols))).astype(np.float32)
        check(ggml, lowbit, t, w, im, name)

"""GPTQ onto ggml's block grids (src/algo/gptq_grid_ggml.c, through
lb__gptq_ggml_test) for every ggml block type lowbit writes, with and
without an importance vector, on random weights with outliers, zero
blocks, zero sub-blocks and tiny values (fixed seeds):

(a) an identity Hessian (and plain rounding through the grid) gives
    exactly the bytes of lowbit's RTN ggml quantizer (lb__ggml_quantize_rows,
    byte-identical to llama.cpp's, tests/llamacpp), no fallback rule used;
(b) a Hessian of correlated inputs with planted outlier channels: GPTQ's
    output error on held-out inputs is below RTN's, also with act-order;
(c) the bytes dequantize (lb_dtype_to_f32, and the gguf package where it
    knows the type) to exactly GPTQ's output values."""
import ctypes
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, ".."))
import internal_lib  # noqa: E402

_P = ctypes.POINTER
# lb_dtype ids (include/lowbit.h), block, block bytes, gguf type id
TYPES = {
    "q4_0": (12, 32, 18, 2), "q4_1": (13, 32, 20, 3), "q5_0": (14, 32, 22, 6), "q5_1": (15, 32, 24, 7),
    "q8_0": (16, 32, 34, 8), "q2_k": (17, 256, 84, 10), "q3_k": (18, 256, 110, 11), "q4_k": (19, 256, 144, 12),
    "q5_k": (20, 256, 176, 13), "q6_k": (21, 256, 210, 14), "mxfp4": (22, 32, 17, 39), "nvfp4": (23, 64, 36, 40),
    "iq4_nl": (24, 32, 18, 20), "iq4_xs": (25, 256, 136, 23),
}
ROWS, COLS = 40, 512


def _lib():
    lib = internal_lib.load()
    f = lib.lb__gptq_ggml_test
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_int, _P(ctypes.c_float), ctypes.c_size_t, ctypes.c_size_t, _P(ctypes.c_double),
                  _P(ctypes.c_float), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, _P(ctypes.c_float),
                  _P(ctypes.c_double)]
    q = lib.lb__ggml_quantize_rows
    q.restype = ctypes.c_int
    q.argtypes = [ctypes.c_int, _P(ctypes.c_float), ctypes.c_size_t, ctypes.c_size_t, _P(ctypes.c_float),
                  ctypes.c_void_p]
    s = lib.lb__ggml_nvfp4_scale
    s.restype = ctypes.c_float
    s.argtypes = [_P(ctypes.c_float), ctypes.c_size_t]
    lib.lb_dtype_to_f32.restype = ctypes.c_int
    lib.lb_dtype_to_f32.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, _P(ctypes.c_float)]
    lib.lb_last_error.restype = ctypes.c_char_p
    return lib


LIB = _lib()


def fptr(a):
    return None if a is None else a.ctypes.data_as(_P(ctypes.c_float))


def nbytes(t, rows, cols):
    _, block, bb, _ = TYPES[t]
    return rows * cols // block * bb


def gptq(t, W, H=None, imatrix=None, actorder=0):
    """(Q values, bytes, tensor scale, fallbacks); H None: plain rounding through the grid."""
    w = np.array(W, dtype=np.float32, order="C")
    rows, cols = w.shape
    dst = np.zeros(nbytes(t, rows, cols), dtype=np.uint8)
    ts = ctypes.c_float(0)
    stats = (ctypes.c_double * 2)()
    h = None if H is None else np.ascontiguousarray(H, dtype=np.float64)
    im = None if imatrix is None else np.ascontiguousarray(imatrix, dtype=np.float32)
    st = LIB.lb__gptq_ggml_test(TYPES[t][0], fptr(w), rows, cols,
                                None if h is None else h.ctypes.data_as(_P(ctypes.c_double)), fptr(im), actorder,
                                actorder, 1, dst.ctypes.data, ctypes.byref(ts), stats)
    assert st == 0, LIB.lb_last_error().decode()
    return w, dst, ts.value, int(stats[0])


def rtn_bytes(t, W, imatrix=None):
    """lowbit's RTN ggml quantization (NVFP4: over its tensor scale, as the GGUF writer)."""
    w = np.array(W, dtype=np.float32, order="C")
    rows, cols = w.shape
    scale = 1.0
    if t == "nvfp4":
        scale = LIB.lb__ggml_nvfp4_scale(fptr(w), w.size)
        w = (w / np.float32(scale)).astype(np.float32)
    dst = np.zeros(nbytes(t, rows, cols), dtype=np.uint8)
    im = None if imatrix is None else np.ascontiguousarray(imatrix, dtype=np.float32)
    assert LIB.lb__ggml_quantize_rows(TYPES[t][0], fptr(w), rows, cols, fptr(im), dst.ctypes.data) == 0
    return dst, scale


def dequant(t, data, rows, cols, scale=1.0):
    out = np.zeros(rows * cols, dtype=np.float32)
    assert LIB.lb_dtype_to_f32(TYPES[t][0], data.ctypes.data, out.size, fptr(out)) == 0
    out = out.reshape(rows, cols)
    if scale != 1.0:
        out = (out * np.float32(scale)).astype(np.float32)
    return out


def hard_weights(seed, rows=ROWS, cols=COLS):
    """Gaussian rows with heavy-tailed outliers, a zero block, a zero
    sub-block, tiny rows (fp16-subnormal and fp16-zero scales), a row of
    one sign and a flat row."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
    mask = rng.random((rows, cols)) < 0.01
    W[mask] *= 25.0
    W[0, :256] = 0.0            # a zero super-block
    W[1, 16:48] = 0.0           # zero (sub-)blocks inside a super-block
    W[2] *= np.float32(2e-5)    # fp16-subnormal scales
    W[3] *= np.float32(1e-9)    # scales that round to fp16 zero
    W[4] = np.abs(W[4])         # one sign: mins at 0
    W[5, :] = 0.03              # flat
    W[6, 64:96] = -0.02         # a flat negative block
    W[7, 100] = 3.0             # a lone outlier
    return W


def importance(seed, cols=COLS):
    rng = np.random.default_rng(seed)
    im = rng.exponential(1.0, cols).astype(np.float32)
    im[rng.random(cols) < 0.05] = 0.0
    im[5] = 50.0
    return im


def check_dequant(t, q, data, scale):
    rows, cols = q.shape
    deq = dequant(t, data, rows, cols, scale)
    np.testing.assert_array_equal(deq.view(np.uint32), q.view(np.uint32))
    try:
        import gguf
        ref = gguf.quants.dequantize(data.reshape(rows, -1), gguf.GGMLQuantizationType(TYPES[t][3]))
    except (ImportError, NotImplementedError, ValueError):
        return
    ref = np.asarray(ref, dtype=np.float32).reshape(rows, cols)
    if scale != 1.0:
        ref = (ref * np.float32(scale)).astype(np.float32)
    np.testing.assert_array_equal(ref.view(np.uint32), q.view(np.uint32))


@pytest.mark.parametrize("with_im", [False, True])
@pytest.mark.parametrize("t", list(TYPES))
def test_identity_hessian_is_rtn(t, with_im):
    W = hard_weights(1)
    im = importance(2) if with_im else None
    ref, scale = rtn_bytes(t, W, im)
    for H in (np.eye(COLS), None):
        q, data, ts, fallbacks = gptq(t, W, H, im)
        assert fallbacks == 0
        assert np.float32(ts) == np.float32(scale)
        bad = np.flatnonzero(data != ref)
        assert bad.size == 0, f"{t}: {bad.size} bytes differ from RTN, first at {bad[:8]}"
        check_dequant(t, q, data, ts)
        np.testing.assert_array_equal(q, dequant(t, ref, ROWS, COLS, scale))


def layer(seed, n=1024, cols=COLS):
    """Correlated inputs (a random mixing of fewer factors plus noise) with
    a few planted outlier channels; calibration and held-out draws."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((cols // 4, cols)) / np.sqrt(cols / 4)
    gain = np.ones(cols)
    gain[rng.choice(cols, 6, replace=False)] = 20.0

    def draw(m):
        return ((rng.standard_normal((m, cols // 4)) @ A + 0.3 * rng.standard_normal((m, cols))) * gain)
    return draw(n), draw(n)


@pytest.mark.parametrize("with_im", [False, True])
@pytest.mark.parametrize("t", list(TYPES))
def test_gptq_beats_rtn(t, with_im):
    rng = np.random.default_rng(3)
    W = (rng.standard_normal((ROWS, COLS)) * 0.05).astype(np.float32)
    X, Xh = layer(4)
    H = 2.0 * X.T @ X
    im = np.mean(X * X, axis=0).astype(np.float32) if with_im else None
    ref, scale = rtn_bytes(t, W, im)
    rtn = dequant(t, ref, ROWS, COLS, scale)

    def err(Q):
        return np.linalg.norm(Xh @ (W.astype(np.float64) - Q.astype(np.float64)).T)
    q, data, ts, _ = gptq(t, W, H, im)
    check_dequant(t, q, data, ts)
    e_rtn, e_gptq = err(rtn), err(q)
    assert e_gptq < e_rtn, f"{t}: GPTQ {e_gptq:.4g} vs RTN {e_rtn:.4g}"
    if t in ("q4_k", "q4_0", "iq4_xs"):  # act-order (static groups) too
        qa, data_a, ts_a, _ = gptq(t, W, H, im, actorder=1)
        check_dequant(t, qa, data_a, ts_a)
        assert err(qa) < e_rtn


STORIES = os.path.join(HERE, "..", "..", "models", "stories260K.bin")


class Tensor(ctypes.Structure):  # lb_tensor
    _fields_ = [("name", ctypes.c_char_p), ("file_name", ctypes.c_char_p), ("dtype", ctypes.c_int),
                ("n_dims", ctypes.c_int), ("shape", ctypes.c_uint64 * 8), ("n_elements", ctypes.c_uint64),
                ("n_bytes", ctypes.c_uint64), ("data", ctypes.c_void_p)]


class GGUFOptions(ctypes.Structure):  # lb_gguf_options (tests/lowbit_ctypes.py's, which loads liblowbit.so)
    _fields_ = [("type", ctypes.c_char_p), ("pure", ctypes.c_int), ("output_tensor_type", ctypes.c_char_p),
                ("token_embedding_type", ctypes.c_char_p), ("tensor_types", _P(ctypes.c_char_p)),
                ("n_tensor_types", ctypes.c_size_t), ("leave_output", ctypes.c_int), ("threads", ctypes.c_int),
                ("progress", ctypes.c_void_p), ("progress_ctx", ctypes.c_void_p),
                ("imatrix", ctypes.c_void_p), ("imatrix_file", ctypes.c_char_p),
                ("imatrix_include", _P(ctypes.c_char_p)), ("n_imatrix_include", ctypes.c_size_t),
                ("imatrix_exclude", _P(ctypes.c_char_p)), ("n_imatrix_exclude", ctypes.c_size_t)]


def test_gguf_writer_stores_the_set_bytes(tmp_path):
    """lb__qmodel_set_ggml_bytes: the GGUF writer stores exactly the bytes
    set (NVFP4's scale tensor the one set), lb_qmodel_values_f32 gives
    their values, and a change of the entry drops them."""
    gguf = pytest.importorskip("gguf")
    lib = LIB  # the qmodel and the internal setter from one copy of the library
    model, h = ctypes.c_void_p(), ctypes.c_void_p()
    lib.lb_model_open.argtypes = [ctypes.c_char_p, _P(ctypes.c_void_p)]
    lib.lb_qmodel_new.argtypes = [ctypes.c_void_p, _P(ctypes.c_void_p)]
    assert lib.lb_model_open(STORIES.encode(), ctypes.byref(model)) == 0
    assert lib.lb_qmodel_new(model, ctypes.byref(h)) == 0
    find, entry = lib.lb_qmodel_find, lib.lb_qmodel_entry
    find.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _P(ctypes.c_size_t)]
    entry.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.lb_qmodel_set_ggml.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.lb_qmodel_source_f32.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.lb_qmodel_values_f32.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int]
    lib.lb_qmodel_set_imatrix.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
    lib.lb_qmodel_gguf_name.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    lib.lb_gguf_choose.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.lb_export_gguf.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p]
    setb = lib.lb__qmodel_set_ggml_bytes
    setb.restype = ctypes.c_int
    setb.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_float]
    try:
        o = GGUFOptions(type=b"Q8_0", pure=1, threads=2)
        assert lib.lb_gguf_choose(h, ctypes.byref(o), None) == 0
        picks = {"model.layers.0.self_attn.q_proj.weight": "nvfp4", "model.layers.1.self_attn.o_proj.weight": "q4_0",
                 "model.layers.2.mlp.gate_proj.weight": "iq4_nl"}
        rng = np.random.default_rng(5)
        want = {}
        for name, t in picks.items():
            i = ctypes.c_size_t()
            assert find(h, name.encode(), ctypes.byref(i)) == 0
            i = i.value
            e = (ctypes.c_void_p * 64)()  # lb_qentry; its first field is the lb_tensor pointer
            assert entry(h, i, e) == 0
            tensor = ctypes.cast(e[0], _P(Tensor)).contents
            rows, cols = tensor.shape[0], tensor.shape[1]
            assert lib.lb_qmodel_set_ggml(h, i, TYPES[t][0]) == 0
            w = np.zeros((rows, cols), dtype=np.float32)
            assert lib.lb_qmodel_source_f32(h, i, w.ctypes.data) == 0
            X = rng.standard_normal((256, cols // 2)) @ rng.standard_normal((cols // 2, cols))
            q, data, ts, _ = gptq(t, w, X.T @ X)
            rtn, _ = rtn_bytes(t, w)
            assert (data != rtn).any()  # GPTQ's, not what the writer would make
            assert setb(h, i, data.ctypes.data, data.size - 1, ts) == 1  # LB_ERR_ARG: wrong size
            assert setb(h, i, data.ctypes.data, data.size, ts) == 0
            got = np.zeros_like(w)
            assert lib.lb_qmodel_values_f32(h, i, got.ctypes.data, 1) == 0
            np.testing.assert_array_equal(got.view(np.uint32), q.view(np.uint32))
            buf = ctypes.create_string_buffer(128)
            assert lib.lb_qmodel_gguf_name(h, i, buf, 128) == 0
            want[buf.value.decode()] = (t, rows, data, ts)
        out = tmp_path / "m.gguf"
        assert lib.lb_export_gguf(h, str(out).encode(), ctypes.byref(o), None) == 0, lib.lb_last_error()
        tensors = {x.name: x for x in gguf.GGUFReader(str(out)).tensors}
        for name, (t, rows, data, ts) in want.items():
            file = np.asarray(tensors[name].data).view(np.uint8).reshape(rows, -1)
            mine = data.reshape(rows, -1)
            # llama2.c's q rows are in llama.cpp's rotary layout already (a Hugging Face
            # model's would move, whole rows of blocks; not exercised here)
            np.testing.assert_array_equal(file, mine)
            if t == "nvfp4":
                assert float(np.asarray(tensors[name[:-len(".weight")] + ".scale"].data).ravel()[0]) == ts
        # a change of the entry drops the bytes: the values are RTN's again
        i = ctypes.c_size_t()
        assert find(h, b"model.layers.1.self_attn.o_proj.weight", ctypes.byref(i)) == 0
        w = np.zeros((64, 64), dtype=np.float32)
        assert lib.lb_qmodel_source_f32(h, i.value, w.ctypes.data) == 0
        im = np.ones(64, dtype=np.float32)
        assert lib.lb_qmodel_set_imatrix(h, i.value, im.ctypes.data, 64) == 0
        got = np.zeros_like(w)
        assert lib.lb_qmodel_values_f32(h, i.value, got.ctypes.data, 1) == 0
        rtn, _ = rtn_bytes("q4_0", w, im)
        np.testing.assert_array_equal(got, dequant("q4_0", rtn, 64, 64))
    finally:
        lib.lb_qmodel_free(h)
        lib.lb_model_close(model)

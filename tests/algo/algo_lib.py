"""What the outlier methods' tests share (SmoothQuant: smooth_lib, AWQ:
awq_lib): build/tests/liblowbit_internal.so with the public functions
they call, the calibration pass's statistics struct (calib_pass.h), a
small quantized-model wrapper over that same library (lowbit_ctypes binds
liblowbit.so, another copy with its own lb_last_error and its own
qmodels), tokenizing, lb_qmodel_apply_method and a numpy KL divergence."""
import ctypes
import os
import sys

import numpy as np

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "model"))
import internal_lib  # noqa: E402
import lowbit_ctypes as lb  # noqa: E402
import model_lib as ml  # noqa: E402

SITE_ATTN_IN, SITE_O_IN, SITE_MLP_IN, SITE_DOWN_IN = 0, 1, 2, 3
LB_OK, LB_ERR_ARG, LB_ERR_UNSUPPORTED = 0, 1, 7
ACT_NONE, ACT_DYNAMIC, ACT_STATIC = 0, 1, 2
METHOD_RTN, METHOD_SMOOTHQUANT, METHOD_AWQ, METHOD_GPTQ, METHOD_AWQ_GPTQ = 0, 1, 2, 3, 4
_P = ctypes.c_void_p
_F = ctypes.POINTER(ctypes.c_float)
_D = ctypes.POINTER(ctypes.c_double)


class SiteStats(ctypes.Structure):
    """lb__site_stats"""
    _fields_ = [("cols", ctypes.c_size_t), ("rows", ctypes.c_uint64), ("absmax", _F), ("mean_abs", _F),
                ("mean_sq", _F), ("sample", _F), ("n_sample", ctypes.c_size_t), ("hessian", _D),
                ("weight", ctypes.c_size_t * 3), ("n_weights", ctypes.c_size_t)]


class LayerStats(ctypes.Structure):
    """lb__layer_stats"""
    _fields_ = [("layer", ctypes.c_size_t), ("site", SiteStats * 4), ("n_kv_heads", ctypes.c_size_t),
                ("head_dim", ctypes.c_size_t), ("k_absmax", _F), ("v_absmax", _F), ("attn_norm", ctypes.c_size_t),
                ("ffn_norm", ctypes.c_size_t), ("partial", ctypes.c_int), ("current", ctypes.c_int)]


class PassOptions(ctypes.Structure):
    """lb__calib_pass_options"""
    _fields_ = [("mode", ctypes.c_int), ("sample_rows", ctypes.c_size_t), ("hessian", ctypes.c_int), ("keep_outputs", ctypes.c_int),
                ("threads", ctypes.c_int), ("progress", _P), ("progress_ctx", _P)]


LAYER_FN = ctypes.CFUNCTYPE(ctypes.c_int, _P, _P, ctypes.POINTER(LayerStats))


def calib_pass():
    """lb__calib_pass, its argument types bound to this module's mirrors each time: other test modules
    (tests/model/test_calib_pass.py) bind their own mirrors on the same library handle."""
    f = lib.lb__calib_pass
    f.argtypes = [_P, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(PassOptions),
                  LAYER_FN, _P]
    f.restype = ctypes.c_int
    return f


class MethodOptions(ctypes.Structure):
    """lb_method_options"""
    _fields_ = [("method", ctypes.c_int), ("alpha", ctypes.c_float), ("alpha_search", ctypes.c_int),
                ("calib_seqs", ctypes.c_uint32), ("calib_len", ctypes.c_uint32), ("sample_rows", ctypes.c_uint32),
                ("damp", ctypes.c_double), ("block", ctypes.c_uint32), ("gptq_order", ctypes.c_int),
                ("static_groups", ctypes.c_int), ("threads", ctypes.c_int), ("progress", _P), ("progress_ctx", _P),
                ("warn", _P), ("warn_ctx", _P), ("gptq_scales", ctypes.c_int), ("gptq_sequential", ctypes.c_int)]


lib = internal_lib.load()
lib.lb_last_error.restype = ctypes.c_char_p
for _name in ["lb_model_open", "lb_model_close", "lb_qmodel_new", "lb_qmodel_free", "lb_qmodel_count",
              "lb_qmodel_find", "lb_qmodel_entry", "lb_qmodel_set_spec", "lb_qmodel_replace", "lb_qmodel_set_act",
              "lb_qmodel_source_f32", "lb_qmodel_values_f32", "lb_qmodel_set_dtype", "lb_qmodel_keep",
              "lb_qmodel_set_ggml", "lb_qmodel_set_imatrix", "lb_runner_from_qmodel", "lb_runner_free",
              "lb_runner_vocab_size", "lb_runner_forward", "lb_qspec_parse", "lb_calibrate"]:
    src = getattr(lb.lib, _name)
    getattr(lib, _name).argtypes = src.argtypes
    getattr(lib, _name).restype = src.restype
lib.lb_model_arch.restype = ctypes.POINTER(ml.Arch)
lib.lb_model_arch.argtypes = [_P]
lib.lb_dtype_by_name.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
lib.lb_dtype_get.argtypes = [ctypes.c_int]
lib.lb_dtype_get.restype = _P
lib.lb_qmodel_apply_method.argtypes = [_P, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                       ctypes.POINTER(MethodOptions)]
lib.lb_tokenizer_from_model.argtypes = [_P, ctypes.c_char_p, ctypes.POINTER(_P)]
lib.lb_tokenizer_free.argtypes = [_P]
lib.lb_tokenizer_free.restype = None
lib.lb_tokenize.argtypes = [_P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                            ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)), ctypes.POINTER(ctypes.c_size_t)]
_libc = ctypes.CDLL(None)  # lb_tokenize's ids are malloc'd
_libc.free.argtypes = [_P]
_libc.free.restype = None

DT_COUNT = next(t for t in range(256) if not lib.lb_dtype_get(t))


def fp(a):
    """A float32 C array's pointer (a must stay alive)."""
    assert a.dtype == np.float32 and a.flags.c_contiguous
    return a.ctypes.data_as(_F)


def check(st, what=""):
    assert st == LB_OK, f"{what}: {lib.lb_last_error().decode()}"


def dtype(name):
    t = ctypes.c_int()
    check(lib.lb_dtype_by_name(name.encode(), ctypes.byref(t)), name)
    return t.value


DT_F32 = dtype("f32")


def spec(text):
    s = lb.QSpec()
    check(lib.lb_qspec_parse(text.encode(), ctypes.byref(s)), text)
    return s


class QModel:
    """lb_model_open + lb_qmodel_new on the internal library."""

    def __init__(self, path):
        self.model = ctypes.c_void_p()
        check(lib.lb_model_open(str(path).encode(), ctypes.byref(self.model)), f"open {path}")
        self.h = ctypes.c_void_p()
        check(lib.lb_qmodel_new(self.model, ctypes.byref(self.h)), "lb_qmodel_new")

    def close(self):
        lib.lb_qmodel_free(self.h)
        lib.lb_model_close(self.model)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self):
        return lib.lb_qmodel_count(self.h)

    def arch(self):
        return lib.lb_model_arch(self.model).contents

    def set_dtype(self, dt):
        check(lib.lb_qmodel_set_dtype(self.h, dt), "set_dtype")

    def index(self, name):
        i = ctypes.c_size_t()
        check(lib.lb_qmodel_find(self.h, name.encode(), ctypes.byref(i)), name)
        return i.value

    def entry(self, i):
        e = lb.QEntry()
        check(lib.lb_qmodel_entry(self.h, i, ctypes.byref(e)), "entry")
        return e

    def name(self, i):
        return self.entry(i).tensor.contents.name.decode()

    def shape(self, i):
        t = self.entry(i).tensor.contents
        return tuple(t.shape[d] for d in range(t.n_dims))

    def set_spec(self, i, text):
        s = spec(text)
        check(lib.lb_qmodel_set_spec(self.h, i, ctypes.byref(s)), text)

    def set_act(self, i, mode, text):
        a = lb.QAct(mode=mode, spec=spec(text))
        check(lib.lb_qmodel_set_act(self.h, i, ctypes.byref(a)), text)

    def set_ggml(self, i, name):
        check(lib.lb_qmodel_set_ggml(self.h, i, dtype(name)), name)

    def set_imatrix(self, i, im):
        im = np.ascontiguousarray(im, dtype=np.float32)
        check(lib.lb_qmodel_set_imatrix(self.h, i, im.ctypes.data, im.size), "set_imatrix")

    def keep(self, i):
        check(lib.lb_qmodel_keep(self.h, i), "keep")

    def source(self, i):
        out = np.empty(self.shape(i), dtype=np.float32)
        check(lib.lb_qmodel_source_f32(self.h, i, out.ctypes.data), "source")
        return out

    def replace(self, i, values):
        v = np.ascontiguousarray(values, dtype=np.float32)
        assert v.shape == self.shape(i)
        check(lib.lb_qmodel_replace(self.h, i, v.ctypes.data), "replace")

    def values(self, i, threads=2):
        out = np.empty(self.shape(i), dtype=np.float32)
        check(lib.lb_qmodel_values_f32(self.h, i, out.ctypes.data, threads), "values")
        return out

    def tokens(self, path, text):
        """text tokenized by the model's tokenizer (no BOS)."""
        t = _P()
        check(lib.lb_tokenizer_from_model(self.model, str(path).encode(), ctypes.byref(t)), "tokenizer")
        try:
            ids, n = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
            b = text.encode()
            check(lib.lb_tokenize(t, b, len(b), 0, ctypes.byref(ids), ctypes.byref(n)), "tokenize")
            out = np.ctypeslib.as_array(ids, (n.value,)).copy()
            _libc.free(ids)
            return out
        finally:
            lib.lb_tokenizer_free(t)

    def apply_method(self, method, ids, seqs, length, sample_rows, alpha=0.5, search=0, threads=2, sequential=0):
        """lb_qmodel_apply_method; its status (sequential: lb_gptq_sequential, 0 SUBLAYER, 1 LAYER)."""
        o = MethodOptions(method=method, alpha=alpha, alpha_search=search, calib_seqs=seqs, calib_len=length,
                          sample_rows=sample_rows, threads=threads, gptq_sequential=sequential)
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        return lib.lb_qmodel_apply_method(self.h, ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), ids.size,
                                          ctypes.byref(o))

    def calibrate(self, ids, ctx, threads=2):
        """lb_calibrate: static activation ranges from ids in windows of ctx."""
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        o = lb.CalibOptions(threads=threads, ctx=ctx)
        check(lib.lb_calibrate(self.h, ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), ids.size,
                               ctypes.byref(o)), "lb_calibrate")

    def logits(self, tokens, threads=2):
        """lb_runner_from_qmodel's logits of tokens from position 0."""
        o = lb.RunnerOptions(threads=threads)
        h = ctypes.c_void_p()
        check(lib.lb_runner_from_qmodel(self.h, ctypes.byref(o), ctypes.byref(h)), "runner")
        try:
            toks = np.ascontiguousarray(tokens, dtype=np.int32)
            out = np.empty((toks.size, lib.lb_runner_vocab_size(h)), dtype=np.float32)
            check(lib.lb_runner_forward(h, toks.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), toks.size,
                                        out.ctypes.data, 0), "forward")
            return out
        finally:
            lib.lb_runner_free(h)


LAYER_WEIGHTS = [("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("self_attn.o_proj",),
                 ("mlp.gate_proj", "mlp.up_proj"), ("mlp.down_proj",)]


def kld(p_logits, q_logits):
    """mean over positions of KL(p || q) from logits, float64."""
    def logsoftmax(z):
        z = z.astype(np.float64)
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))
    lp, lq = logsoftmax(p_logits), logsoftmax(q_logits)
    return float((np.exp(lp) * (lp - lq)).sum(-1).mean())

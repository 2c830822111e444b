"""ctypes access to AWQ's internals (src/algo/awq.h), the fake quantizer
it measures through (src/weights/qmodel_internal.h) and the calibration
pass's statistics struct (calib_pass.h), all through
build/tests/liblowbit_internal.so, with a small quantized-model wrapper
over that same library (lowbit_ctypes binds liblowbit.so, another copy
with its own lb_last_error and its own qmodels)."""
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
LB_OK, LB_ERR_ARG = 0, 1
_P = ctypes.c_void_p
_F = ctypes.POINTER(ctypes.c_float)
_D = ctypes.POINTER(ctypes.c_double)

FAKEQ_FN = ctypes.CFUNCTYPE(ctypes.c_int, _P, _F, ctypes.c_size_t, ctypes.c_size_t)


class SiteStats(ctypes.Structure):
    """lb__site_stats"""
    _fields_ = [("cols", ctypes.c_size_t), ("rows", ctypes.c_uint64), ("absmax", _F), ("mean_abs", _F),
                ("mean_sq", _F), ("sample", _F), ("n_sample", ctypes.c_size_t), ("hessian", _D),
                ("weight", ctypes.c_size_t * 3), ("n_weights", ctypes.c_size_t)]


class LayerStats(ctypes.Structure):
    """lb__layer_stats"""
    _fields_ = [("layer", ctypes.c_size_t), ("site", SiteStats * 4), ("n_kv_heads", ctypes.c_size_t),
                ("head_dim", ctypes.c_size_t), ("k_absmax", _F), ("v_absmax", _F), ("attn_norm", ctypes.c_size_t),
                ("ffn_norm", ctypes.c_size_t)]


class AwqOptions(ctypes.Structure):
    """lb__awq_options"""
    _fields_ = [("grid", ctypes.c_int), ("clip", ctypes.c_int), ("threads", ctypes.c_int)]


class FakeQ(ctypes.Structure):
    """lb__fakeq"""
    _fields_ = [("spec", lb.QSpec), ("ggml", ctypes.c_int), ("imatrix", _F), ("n_imatrix", ctypes.c_size_t),
                ("threads", ctypes.c_int)]


lib = internal_lib.load()
lib.lb_last_error.restype = ctypes.c_char_p
for _name in ["lb_model_open", "lb_model_close", "lb_qmodel_new", "lb_qmodel_free", "lb_qmodel_count",
              "lb_qmodel_find", "lb_qmodel_entry", "lb_qmodel_set_spec", "lb_qmodel_replace", "lb_qmodel_set_act",
              "lb_qmodel_source_f32", "lb_qmodel_values_f32", "lb_qmodel_set_dtype", "lb_qmodel_keep",
              "lb_qmodel_set_ggml", "lb_qmodel_set_imatrix", "lb_runner_from_qmodel", "lb_runner_free",
              "lb_runner_vocab_size", "lb_runner_forward", "lb_qspec_parse"]:
    src = getattr(lb.lib, _name)
    getattr(lib, _name).argtypes = src.argtypes
    getattr(lib, _name).restype = src.restype
lib.lb_model_arch.restype = ctypes.POINTER(ml.Arch)
lib.lb_model_arch.argtypes = [_P]
lib.lb_dtype_by_name.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
lib.lb_dtype_get.argtypes = [ctypes.c_int]
lib.lb_dtype_get.restype = _P
lib.lb__awq_search_scale.argtypes = [_F, ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t, ctypes.c_size_t, _F,
                                     ctypes.c_size_t, _F, ctypes.c_int, FAKEQ_FN, ctypes.POINTER(_P), _F, _D,
                                     ctypes.POINTER(ctypes.c_int), ctypes.c_int]
lib.lb__awq_search_clip.argtypes = [_F, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t, _F, ctypes.c_size_t,
                                    ctypes.c_int, ctypes.c_float, FAKEQ_FN, _P, _F, ctypes.c_int]
lib.lb__awq_layer.argtypes = [_P, _P, ctypes.POINTER(LayerStats)]
lib.lb__qmodel_fake_quantize.argtypes = [_P, ctypes.c_size_t, _F, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int]
lib.lb__qmodel_fakeq.argtypes = [_P, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(FakeQ)]
# the C fake quantizer as a callback the searches take (an lb__fakeq_fn: its ctx is an lb__fakeq)
C_FAKEQ = FAKEQ_FN(ctypes.cast(lib.lb_test_internal(b"lb__fake_quantize"), _P).value)

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


def fakeq(quantizer, threads=2, imatrix=None):
    """An lb__fakeq for a qspec text or a ggml type name ("ggml:q4_k")."""
    f = FakeQ(ggml=DT_COUNT, threads=threads)
    if quantizer.startswith("ggml:"):
        f.ggml = dtype(quantizer[5:])
    else:
        f.spec = spec(quantizer)
    if imatrix is not None:
        f._im = np.ascontiguousarray(imatrix, dtype=np.float32)
        f.imatrix, f.n_imatrix = fp(f._im), f._im.size
    return f


def fake_quantize(f, w):
    """w through the lb__fakeq f and back (a copy)."""
    out = np.array(w, dtype=np.float32, order="C", copy=True)
    check(C_FAKEQ(ctypes.cast(ctypes.pointer(f), _P), fp(out), out.shape[0], out.shape[1]), "fake quantize")
    return out


def search_scale(w, member_rows, x, x_mean, grid, fn, ctxs, threads=2):
    """lb__awq_search_scale: (s, err[grid], best)."""
    w, x, x_mean = (np.ascontiguousarray(a, dtype=np.float32) for a in (w, x, x_mean))
    rows = (ctypes.c_size_t * len(member_rows))(*member_rows)
    qctx = (_P * len(ctxs))(*ctxs)
    s = np.empty(w.shape[1], dtype=np.float32)
    err = np.empty(grid, dtype=np.float64)
    best = ctypes.c_int(-1)
    check(lib.lb__awq_search_scale(fp(w), rows, len(member_rows), w.shape[1], fp(x), x.shape[0], fp(x_mean), grid,
                                   fn, qctx, fp(s), err.ctypes.data_as(_D), ctypes.byref(best), threads),
          "lb__awq_search_scale")
    return s, err, best.value


def search_clip(w, group, x, grid, max_shrink, fn, ctx, threads=2):
    """lb__awq_search_clip: clip[rows][blocks]."""
    w, x = (np.ascontiguousarray(a, dtype=np.float32) for a in (w, x))
    blocks = -(-w.shape[1] // group)
    clip = np.empty((w.shape[0], blocks), dtype=np.float32)
    check(lib.lb__awq_search_clip(fp(w), w.shape[0], w.shape[1], group, fp(x), x.shape[0], grid, max_shrink, fn, ctx,
                                  fp(clip), threads), "lb__awq_search_clip")
    return clip


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

    def values(self, i, threads=2):
        out = np.empty(self.shape(i), dtype=np.float32)
        check(lib.lb_qmodel_values_f32(self.h, i, out.ctypes.data, threads), "values")
        return out

    def fake_quantize(self, i, w, threads=2):
        out = np.array(w, dtype=np.float32, order="C", copy=True)
        st = lib.lb__qmodel_fake_quantize(self.h, i, fp(out), out.shape[0], out.shape[1], threads)
        return st, out

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


class Stats:
    """A hand-made lb__layer_stats for layer `layer` of q: per site, sample
    rows (n x cols) and their mean |x| (or the given means); keeps its
    arrays alive."""

    def __init__(self, q, layer, samples, mean_abs=None):
        a = q.arch()
        self.keep = []
        self.s = LayerStats(layer=layer, n_kv_heads=a.n_kv_heads, head_dim=a.head_dim)
        pre = f"model.layers.{layer}."
        self.s.attn_norm = q.index(pre + "input_layernorm.weight")
        self.s.ffn_norm = q.index(pre + "post_attention_layernorm.weight")
        self.weights = []
        for site, names in enumerate(LAYER_WEIGHTS):
            ss = self.s.site[site]
            idx = [q.index(pre + n + ".weight") for n in names]
            self.weights.append(idx)
            ss.n_weights = len(idx)
            for k, i in enumerate(idx):
                ss.weight[k] = i
            x = np.ascontiguousarray(samples[site], dtype=np.float32)
            assert q.shape(idx[0])[1] == x.shape[1]
            m = np.abs(x).mean(0) if mean_abs is None else mean_abs[site]
            m = np.ascontiguousarray(m, dtype=np.float32)
            amax = np.ascontiguousarray(np.abs(x).max(0), dtype=np.float32)
            self.keep += [x, m, amax]
            ss.cols, ss.rows, ss.n_sample = x.shape[1], x.shape[0], x.shape[0]
            ss.sample, ss.mean_abs, ss.absmax = fp(x), fp(m), fp(amax)

    def ref(self):
        return ctypes.byref(self.s)


def awq_layer(q, stats, grid=20, clip=1, threads=2):
    o = AwqOptions(grid=grid, clip=clip, threads=threads)
    return lib.lb__awq_layer(ctypes.byref(o), q.h, stats.ref())

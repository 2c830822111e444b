"""ctypes access to AWQ's internals (src/algo/awq.h) and the fake
quantizer it measures through (src/weights/qmodel_internal.h), through
build/tests/liblowbit_internal.so; the library, the statistics struct and
the quantized-model wrapper are algo_lib's (shared with SmoothQuant's
tests)."""
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import algo_lib  # noqa: E402
from algo_lib import (DT_COUNT, DT_F32, LAYER_WEIGHTS, LB_ERR_ARG, LB_OK, SITE_ATTN_IN, SITE_DOWN_IN,  # noqa: E402,F401
                      SITE_MLP_IN, SITE_O_IN, LayerStats, MethodOptions, SiteStats, _D, _F, _P, check, dtype, fp, lb,
                      lib, ml, spec)

FAKEQ_FN = ctypes.CFUNCTYPE(ctypes.c_int, _P, _F, ctypes.c_size_t, ctypes.c_size_t)


class AwqOptions(ctypes.Structure):
    """lb__awq_options"""
    _fields_ = [("grid", ctypes.c_int), ("clip", ctypes.c_int), ("threads", ctypes.c_int)]


class FakeQ(ctypes.Structure):
    """lb__fakeq"""
    _fields_ = [("spec", lb.QSpec), ("ggml", ctypes.c_int), ("imatrix", _F), ("n_imatrix", ctypes.c_size_t),
                ("threads", ctypes.c_int)]


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


class QModel(algo_lib.QModel):
    """algo_lib's wrapper with AWQ's fake quantizer of an entry."""

    def fake_quantize(self, i, w, threads=2):
        out = np.array(w, dtype=np.float32, order="C", copy=True)
        st = lib.lb__qmodel_fake_quantize(self.h, i, fp(out), out.shape[0], out.shape[1], threads)
        return st, out


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

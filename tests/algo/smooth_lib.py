"""ctypes access to SmoothQuant's internals (src/algo/smoothquant.h,
fold.h, smooth_error.h) through build/tests/liblowbit_internal.so; the
library, the statistics struct and the quantized-model wrapper are
algo_lib's (shared with AWQ's tests)."""
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from algo_lib import (ACT_DYNAMIC, ACT_STATIC, DT_F32, LAYER_WEIGHTS, LB_ERR_ARG,  # noqa: E402,F401
                      LB_ERR_UNSUPPORTED, LB_OK, METHOD_RTN, METHOD_SMOOTHQUANT, SITE_ATTN_IN, SITE_DOWN_IN,
                      SITE_MLP_IN, SITE_O_IN, LayerStats, QModel, _F, _P, check, fp, kld, lb, lib, ml, spec)

ALL_SITES = 0xF


class SmoothOptions(ctypes.Structure):
    """lb__smooth_options"""
    _fields_ = [("alpha", ctypes.c_float), ("search", ctypes.c_int), ("threads", ctypes.c_int),
                ("sites", ctypes.c_uint)]


class SmoothMember(ctypes.Structure):
    """lb__smooth_member"""
    _fields_ = [("w", _F), ("rows", ctypes.c_size_t), ("quantized", ctypes.c_int), ("spec", lb.QSpec),
                ("act", lb.QAct), ("y_ref", _F), ("col_absmax", _F)]


class SmoothGroup(ctypes.Structure):
    """lb__smooth_group"""
    _fields_ = [("x", _F), ("n", ctypes.c_size_t), ("cols", ctypes.c_size_t), ("x_absmax", _F),
                ("m", SmoothMember * 3), ("n_members", ctypes.c_size_t), ("scale_dtype", ctypes.c_int),
                ("threads", ctypes.c_int), ("xs", _F), ("xq", _F), ("ws", _F), ("y", _F)]


lib.lb__smoothquant_scales.argtypes = [_F, _F, ctypes.c_size_t, ctypes.c_float, _F]
lib.lb__smoothquant_scales.restype = None
lib.lb__smoothquant_layer.argtypes = [_P, _P, ctypes.POINTER(LayerStats)]
lib.lb__fold_input_scale.argtypes = [_P, ctypes.POINTER(LayerStats), ctypes.c_int, _F, ctypes.c_int]
lib.lb__smooth_group_init.argtypes = [ctypes.POINTER(SmoothGroup)]
lib.lb__smooth_group_error.argtypes = [ctypes.POINTER(SmoothGroup), _F, ctypes.POINTER(ctypes.c_double)]
lib.lb__smooth_group_free.argtypes = [ctypes.POINTER(SmoothGroup)]
lib.lb__smooth_group_free.restype = None


def smoothquant_scales(x_absmax, w_absmax, alpha):
    x = np.ascontiguousarray(x_absmax, dtype=np.float32)
    w = np.ascontiguousarray(w_absmax, dtype=np.float32)
    s = np.empty_like(x)
    lib.lb__smoothquant_scales(fp(x), fp(w), x.size, alpha, fp(s))
    return s


class Stats:
    """A hand-made lb__layer_stats for layer `layer` of q: per-channel
    absmax (and sample rows, optional) for each site; keeps its arrays
    alive."""

    def __init__(self, q, layer, n_kv_heads, head_dim, absmax, samples=None):
        self.keep = []
        self.s = LayerStats(layer=layer, n_kv_heads=n_kv_heads, head_dim=head_dim)
        pre = f"model.layers.{layer}."
        self.s.attn_norm = q.index(pre + "input_layernorm.weight")
        self.s.ffn_norm = q.index(pre + "post_attention_layernorm.weight")
        for site, names in enumerate(LAYER_WEIGHTS):
            ss = self.s.site[site]
            idx = [q.index(pre + n + ".weight") for n in names]
            ss.n_weights = len(idx)
            for k, i in enumerate(idx):
                ss.weight[k] = i
            a = np.ascontiguousarray(absmax[site], dtype=np.float32)
            ss.cols = a.size
            assert q.shape(idx[0])[1] == a.size
            self.keep.append(a)
            ss.absmax = fp(a)
            ss.rows = 1
            if samples is not None:
                x = np.ascontiguousarray(samples[site], dtype=np.float32)
                assert x.shape[1] == a.size
                self.keep.append(x)
                ss.sample = fp(x)
                ss.n_sample = x.shape[0]
                ss.rows = x.shape[0]

    def ref(self):
        return ctypes.byref(self.s)


def smooth_layer(q, stats, alpha=0.5, search=0, sites=0, threads=2):
    o = SmoothOptions(alpha=alpha, search=search, threads=threads, sites=sites)
    return lib.lb__smoothquant_layer(ctypes.byref(o), q.h, stats.ref())

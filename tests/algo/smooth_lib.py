"""ctypes access to SmoothQuant's internals (src/algo/smoothquant.h,
fold.h, smooth_error.h) and the calibration pass's statistics struct
(calib_pass.h), through build/tests/liblowbit_internal.so; a small
quantized-model wrapper over the same library (lowbit_ctypes binds
liblowbit.so, a separate copy with its own lb_last_error)."""
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
ALL_SITES = 0xF
ACT_STATIC = 2
DT_F32 = 0  # LB_DT_F32
_P = ctypes.c_void_p
_F = ctypes.POINTER(ctypes.c_float)


class SiteStats(ctypes.Structure):
    """lb__site_stats"""
    _fields_ = [("cols", ctypes.c_size_t), ("rows", ctypes.c_uint64), ("absmax", _F), ("mean_abs", _F),
                ("mean_sq", _F), ("sample", _F), ("n_sample", ctypes.c_size_t),
                ("hessian", ctypes.POINTER(ctypes.c_double)), ("weight", ctypes.c_size_t * 3),
                ("n_weights", ctypes.c_size_t)]


class LayerStats(ctypes.Structure):
    """lb__layer_stats"""
    _fields_ = [("layer", ctypes.c_size_t), ("site", SiteStats * 4), ("n_kv_heads", ctypes.c_size_t),
                ("head_dim", ctypes.c_size_t), ("k_absmax", _F), ("v_absmax", _F), ("attn_norm", ctypes.c_size_t),
                ("ffn_norm", ctypes.c_size_t)]


class SmoothOptions(ctypes.Structure):
    """lb__smooth_options"""
    _fields_ = [("alpha", ctypes.c_float), ("search", ctypes.c_int), ("threads", ctypes.c_int),
                ("sites", ctypes.c_uint)]


class QSpecMember(ctypes.Structure):
    """lb__smooth_member"""
    _fields_ = [("w", _F), ("rows", ctypes.c_size_t), ("quantized", ctypes.c_int), ("spec", lb.QSpec),
                ("act", lb.QAct), ("y_ref", _F), ("col_absmax", _F)]


class SmoothGroup(ctypes.Structure):
    """lb__smooth_group"""
    _fields_ = [("x", _F), ("n", ctypes.c_size_t), ("cols", ctypes.c_size_t), ("x_absmax", _F),
                ("m", QSpecMember * 3), ("n_members", ctypes.c_size_t), ("scale_dtype", ctypes.c_int),
                ("threads", ctypes.c_int), ("xs", _F), ("xq", _F), ("ws", _F), ("y", _F)]


lib = internal_lib.load()
lib.lb_last_error.restype = ctypes.c_char_p
for _name in ["lb_model_open", "lb_model_close", "lb_qmodel_new", "lb_qmodel_free", "lb_qmodel_count",
              "lb_qmodel_find", "lb_qmodel_entry", "lb_qmodel_set_spec", "lb_qmodel_replace", "lb_qmodel_set_act",
              "lb_qmodel_source_f32", "lb_qmodel_set_dtype", "lb_runner_from_qmodel", "lb_runner_free",
              "lb_runner_reset", "lb_runner_forward", "lb_runner_vocab_size", "lb_qspec_parse"]:
    src = getattr(lb.lib, _name)
    getattr(lib, _name).argtypes = src.argtypes
    getattr(lib, _name).restype = src.restype
lib.lb_model_arch.restype = ctypes.POINTER(ml.Arch)
lib.lb_model_arch.argtypes = [_P]
lib.lb__smoothquant_scales.argtypes = [_F, _F, ctypes.c_size_t, ctypes.c_float, _F]
lib.lb__smoothquant_scales.restype = None
lib.lb__smoothquant_layer.argtypes = [_P, _P, ctypes.POINTER(LayerStats)]
lib.lb__fold_input_scale.argtypes = [_P, ctypes.POINTER(LayerStats), ctypes.c_int, _F, ctypes.c_int]
lib.lb__smooth_group_init.argtypes = [ctypes.POINTER(SmoothGroup)]
lib.lb__smooth_group_error.argtypes = [ctypes.POINTER(SmoothGroup), _F, ctypes.POINTER(ctypes.c_double)]
lib.lb__smooth_group_free.argtypes = [ctypes.POINTER(SmoothGroup)]
lib.lb__smooth_group_free.restype = None


def fp(a):
    """A float32 C array's pointer (a must stay alive)."""
    assert a.dtype == np.float32 and a.flags.c_contiguous
    return a.ctypes.data_as(_F)


def check(st, what=""):
    assert st == 0, f"{what}: {lib.lb_last_error().decode()}"


def spec(text):
    s = lb.QSpec()
    check(lib.lb_qspec_parse(text.encode(), ctypes.byref(s)), text)
    return s


def smoothquant_scales(x_absmax, w_absmax, alpha):
    x = np.ascontiguousarray(x_absmax, dtype=np.float32)
    w = np.ascontiguousarray(w_absmax, dtype=np.float32)
    s = np.empty_like(x)
    lib.lb__smoothquant_scales(fp(x), fp(w), x.size, alpha, fp(s))
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

    def has(self, name):
        i = ctypes.c_size_t()
        return lib.lb_qmodel_find(self.h, name.encode(), ctypes.byref(i)) == 0

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

    def source(self, i):
        out = np.empty(self.shape(i), dtype=np.float32)
        check(lib.lb_qmodel_source_f32(self.h, i, out.ctypes.data), "source")
        return out

    def replace(self, i, values):
        v = np.ascontiguousarray(values, dtype=np.float32)
        assert v.shape == self.shape(i)
        check(lib.lb_qmodel_replace(self.h, i, v.ctypes.data), "replace")

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

"""ctypes binding of liblowbit.so for the oracle tests.

The tests drive the real shared library (the same code the CLI links),
through its public API only."""
import ctypes
import os
import pathlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")

LB_OK, LB_ERR_ARG, LB_ERR_FORMAT, LB_ERR_NAN = 0, 1, 2, 3
LB_SATURATE, LB_IEEE = 0, 1
ISA_SCALAR, ISA_AVX2, ISA_AVX512 = 0, 1, 2
MODES = {"saturate": LB_SATURATE, "ieee": LB_IEEE}


class FormatInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_int),
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_int),
        ("bits", ctypes.c_int),
        ("sign_bits", ctypes.c_int),
        ("exp_bits", ctypes.c_int),
        ("man_bits", ctypes.c_int),
        ("bias", ctypes.c_int),
        ("specials", ctypes.c_int),
        ("max_finite", ctypes.c_double),
        ("min_finite", ctypes.c_double),
        ("min_normal", ctypes.c_double),
        ("min_subnormal", ctypes.c_double),
        ("finite_values", ctypes.c_uint64),
        ("summary", ctypes.c_char_p),
        ("encode", ctypes.c_void_p),
        ("decode", ctypes.c_void_p),
    ]


class DtypeInfo(ctypes.Structure):
    """lb_dtype_info: a row of the model-file storage types"""
    _fields_ = [
        ("id", ctypes.c_int),
        ("name", ctypes.c_char_p),
        ("st_name", ctypes.c_char_p),
        ("ggml_type", ctypes.c_int),
        ("block", ctypes.c_uint),
        ("block_bytes", ctypes.c_uint),
        ("can_read", ctypes.c_int),
        ("can_write", ctypes.c_int),
    ]


lib = ctypes.CDLL(str(BUILD / "liblowbit.so"))
lib.lb_format_get.restype = ctypes.POINTER(FormatInfo)
lib.lb_format_get.argtypes = [ctypes.c_int]
lib.lb_format_by_name.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
lib.lb_last_error.restype = ctypes.c_char_p
lib.lb_format_bytes.restype = ctypes.c_size_t
lib.lb_format_bytes.argtypes = [ctypes.c_int, ctypes.c_size_t]
lib.lb_encode_value.argtypes = [ctypes.c_int, ctypes.c_double, ctypes.c_int, ctypes.POINTER(ctypes.c_uint32)]
lib.lb_decode_value.argtypes = [ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_float)]
lib.lb_encode_f32.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int]
lib.lb_decode_f32.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int]
lib.lb_isa_set.argtypes = [ctypes.c_int]
lib.lb_isa_detected.restype = ctypes.c_int
lib.lb_isa_active.restype = ctypes.c_int

FORMAT_COUNT = 16
FORMATS = {lib.lb_format_get(i).contents.name.decode(): i for i in range(FORMAT_COUNT)}


def info(name):
    return lib.lb_format_get(FORMATS[name]).contents


def isas():
    """Every instruction set this CPU can run, scalar first."""
    return list(range(lib.lb_isa_detected() + 1))


def set_isa(isa):
    assert lib.lb_isa_set(isa) == LB_OK, lib.lb_last_error()


def last_error():
    return lib.lb_last_error().decode()


def pack_codes(name, codes):
    """Codes (one per element) -> the bulk layout the library reads."""
    bits = info(name).bits
    codes = np.asarray(codes, dtype=np.uint64)
    if bits == 4:
        c = codes.astype(np.uint8) & 0xF
        if len(c) % 2:
            c = np.append(c, np.uint8(0))
        return (c[0::2] | (c[1::2] << 4)).astype(np.uint8)
    dtype = {6: np.uint8, 8: np.uint8, 16: np.uint16, 32: np.uint32}[bits]
    return codes.astype(dtype)


def unpack_codes(name, buf, n):
    bits = info(name).bits
    if bits == 4:
        b = np.asarray(buf, dtype=np.uint8)
        out = np.empty(2 * len(b), dtype=np.uint32)
        out[0::2] = b & 0xF
        out[1::2] = b >> 4
        return out[:n]
    return np.asarray(buf).astype(np.uint32)[:n]


def encode(name, values, mode="saturate", threads=1):
    """Bulk-encodes fp32 values; returns (status, codes as uint32 array)."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    nbytes = max(lib.lb_format_bytes(FORMATS[name], len(x)), 4)
    out = np.zeros(nbytes, dtype=np.uint8)
    st = lib.lb_encode_f32(FORMATS[name], MODES[mode], x.ctypes.data, len(x), out.ctypes.data, threads)
    bits = info(name).bits
    view = out if bits in (4, 6, 8) else out.view({16: np.uint16, 32: np.uint32}[bits])
    return st, unpack_codes(name, view, len(x))


def decode(name, codes, threads=1):
    """Bulk-decodes codes (one per element) to fp32."""
    packed = np.ascontiguousarray(pack_codes(name, codes))
    n = len(codes)
    out = np.zeros(max(n, 1), dtype=np.float32)
    st = lib.lb_decode_f32(FORMATS[name], packed.ctypes.data, n, out.ctypes.data, threads)
    assert st == LB_OK, last_error()
    return out[:n]


def encode_value(name, x, mode="saturate"):
    code = ctypes.c_uint32(0)
    st = lib.lb_encode_value(FORMATS[name], float(x), MODES[mode], ctypes.byref(code))
    return st, code.value


def decode_value(name, code):
    out = ctypes.c_float(0)
    st = lib.lb_decode_value(FORMATS[name], code, ctypes.byref(out))
    return st, out.value


# ---------------------------------------------------------------- quantization

class QSpec(ctypes.Structure):
    _fields_ = [
        ("element", ctypes.c_int),
        ("granularity", ctypes.c_int),
        ("group", ctypes.c_size_t),
        ("scale_format", ctypes.c_int),
        ("affine", ctypes.c_int),
        ("two_level", ctypes.c_int),
        ("search", ctypes.c_int),
        ("mx_rounding", ctypes.c_int),
        ("int_frac_bits", ctypes.c_int),
        ("range", ctypes.c_int),
        ("group_rows", ctypes.c_size_t),
    ]


class QView(ctypes.Structure):
    _fields_ = [
        ("spec", QSpec),
        ("rows", ctypes.c_size_t),
        ("cols", ctypes.c_size_t),
        ("data", ctypes.POINTER(ctypes.c_uint8)),
        ("row_bytes", ctypes.c_size_t),
        ("data_bytes", ctypes.c_size_t),
        ("scales", ctypes.POINTER(ctypes.c_uint8)),
        ("scales_per_row", ctypes.c_size_t),
        ("scale_count", ctypes.c_size_t),
        ("scale_bytes", ctypes.c_size_t),
        ("zero_points", ctypes.POINTER(ctypes.c_uint8)),
        ("zero_point_row_bytes", ctypes.c_size_t),
        ("zero_point_bytes", ctypes.c_size_t),
        ("tensor_scale", ctypes.c_float),
        ("scale_rows", ctypes.c_size_t),
    ]


class QStats(ctypes.Structure):
    _fields_ = [
        ("count", ctypes.c_size_t),
        ("mse", ctypes.c_double),
        ("rmse", ctypes.c_double),
        ("mae", ctypes.c_double),
        ("max_abs_error", ctypes.c_double),
        ("max_error_index", ctypes.c_size_t),
        ("max_error_original", ctypes.c_float),
        ("max_error_dequantized", ctypes.c_float),
        ("sqnr_db", ctypes.c_double),
        ("saturated_fraction", ctypes.c_double),
        ("flushed_fraction", ctypes.c_double),
        ("bits_per_value", ctypes.c_double),
    ]


lib.lb_qspec_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(QSpec)]
lib.lb_qspec_validate.argtypes = [ctypes.POINTER(QSpec)]
lib.lb_qspec_format.argtypes = [ctypes.POINTER(QSpec), ctypes.c_char_p, ctypes.c_size_t]
lib.lb_quantize.argtypes = [ctypes.POINTER(QSpec), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int,
                            ctypes.POINTER(ctypes.c_void_p)]
lib.lb_dequantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
lib.lb_qtensor_view_get.argtypes = [ctypes.c_void_p, ctypes.POINTER(QView)]
lib.lb_qtensor_free.argtypes = [ctypes.c_void_p]
lib.lb_qstats_compute.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(QStats)]


def parse_spec(text):
    """Returns (status, QSpec)."""
    s = QSpec()
    return lib.lb_qspec_parse(text.encode(), ctypes.byref(s)), s


def format_spec(spec):
    buf = ctypes.create_string_buffer(256)
    lib.lb_qspec_format(ctypes.byref(spec), buf, 256)
    return buf.value.decode()


class Quantized:
    """What lb_quantize produced, copied out: data (rows x row_bytes uint8),
    scales (raw bytes), zero_point_bytes (raw) and zero_points (decoded ints,
    one per scale; None unless affine), tensor_scale, and the dequantized
    values and statistics."""

    def __init__(self, view, deq, stats):
        self.rows, self.cols = view.rows, view.cols
        self.row_bytes = view.row_bytes
        self.data = np.ctypeslib.as_array(view.data, (view.data_bytes,)).copy().reshape(view.rows, view.row_bytes)
        self.scales = np.ctypeslib.as_array(view.scales, (view.scale_bytes,)).copy()
        self.scales_per_row, self.scale_count = view.scales_per_row, view.scale_count
        self.scale_rows = view.scale_rows
        self.zero_point_bytes = self.zero_points = None
        if view.zero_points:
            raw = np.ctypeslib.as_array(view.zero_points, (view.zero_point_bytes,)).copy()
            self.zero_point_bytes = raw
            el = lib.lb_format_get(view.spec.element).contents
            rows = raw.reshape(-1, view.zero_point_row_bytes)
            per_row = view.scale_count // rows.shape[0] if view.scale_count > 1 else 1
            codes = np.concatenate([unpack_codes(el.name.decode(), r, per_row) for r in rows])[:view.scale_count]
            codes = codes.astype(np.int64)
            if el.sign_bits:
                codes = np.where(codes >= 1 << (el.bits - 1), codes - (1 << el.bits), codes)
            self.zero_points = codes
        self.tensor_scale = np.float32(view.tensor_scale)
        self.dequantized = deq
        self.stats = stats


def quantize(spec_text, x, threads=1):
    """Quantizes x (2-D, or 1-D as one row). Returns (status, Quantized or None)."""
    st, spec = parse_spec(spec_text)
    if st != LB_OK:
        return st, None
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    h = ctypes.c_void_p()
    st = lib.lb_quantize(ctypes.byref(spec), x.ctypes.data, x.shape[0], x.shape[1], threads, ctypes.byref(h))
    if st != LB_OK:
        return st, None
    try:
        view = QView()
        assert lib.lb_qtensor_view_get(h, ctypes.byref(view)) == LB_OK
        deq = np.empty_like(x)
        assert lib.lb_dequantize(h, deq.ctypes.data, threads) == LB_OK
        stats = QStats()
        assert lib.lb_qstats_compute(x.ctypes.data, deq.ctypes.data, h, ctypes.byref(stats)) == LB_OK
        return LB_OK, Quantized(view, deq, stats)
    finally:
        lib.lb_qtensor_free(h)


# ---- the quantized model (lowbit.h, "The quantized model") and runners over it ----

QSTATE_STORED, QSTATE_REPLACED, QSTATE_QUANTIZED, QSTATE_KEPT = 0, 1, 2, 3
ACT_NONE, ACT_DYNAMIC, ACT_STATIC, ACT_LOCAL = 0, 1, 2, 3
MAX_DIMS = 8


class Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("file_name", ctypes.c_char_p), ("dtype", ctypes.c_int),
                ("n_dims", ctypes.c_int), ("shape", ctypes.c_uint64 * MAX_DIMS), ("n_elements", ctypes.c_uint64),
                ("n_bytes", ctypes.c_uint64), ("data", ctypes.c_void_p)]


class QAct(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("spec", QSpec)]


class QEntry(ctypes.Structure):
    _fields_ = [("tensor", ctypes.POINTER(Tensor)), ("state", ctypes.c_int), ("spec", QSpec),
                ("replaced", ctypes.c_int), ("has_qtensor", ctypes.c_int), ("act", QAct),
                ("input_amax", ctypes.c_float), ("fused_group", ctypes.c_int), ("group_amax", ctypes.c_float),
                ("ggml", ctypes.c_int), ("has_imatrix", ctypes.c_int)]


class GGUFOptions(ctypes.Structure):
    """lb_gguf_options"""
    _fields_ = [("type", ctypes.c_char_p), ("pure", ctypes.c_int), ("output_tensor_type", ctypes.c_char_p),
                ("token_embedding_type", ctypes.c_char_p), ("tensor_types", ctypes.POINTER(ctypes.c_char_p)),
                ("n_tensor_types", ctypes.c_size_t), ("leave_output", ctypes.c_int), ("threads", ctypes.c_int),
                ("progress", ctypes.c_void_p), ("progress_ctx", ctypes.c_void_p),
                ("imatrix", ctypes.c_void_p), ("imatrix_file", ctypes.c_char_p),
                ("imatrix_include", ctypes.POINTER(ctypes.c_char_p)), ("n_imatrix_include", ctypes.c_size_t),
                ("imatrix_exclude", ctypes.POINTER(ctypes.c_char_p)), ("n_imatrix_exclude", ctypes.c_size_t)]


class RunnerOptions(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int), ("attn", ctypes.c_void_p), ("mlp", ctypes.c_void_p),
                ("embed", ctypes.c_void_p), ("head", ctypes.c_void_p), ("max_ctx", ctypes.c_uint32),
                ("fake", ctypes.c_int), ("act", ctypes.c_int), ("kv", ctypes.c_int), ("progress", ctypes.c_void_p),
                ("progress_ctx", ctypes.c_void_p), ("ggml_act", ctypes.c_int),
                ("decode_act", ctypes.c_int)]


class CalibOptions(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int), ("ctx", ctypes.c_uint32), ("progress", ctypes.c_void_p),
                ("progress_ctx", ctypes.c_void_p)]


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
for _name, _args, _res in [
    ("lb_model_open", [ctypes.c_char_p, _PP], ctypes.c_int), ("lb_model_close", [_P], None),
    ("lb_qmodel_new", [_P, _PP], ctypes.c_int), ("lb_qmodel_free", [_P], None),
    ("lb_qmodel_from_checkpoint", [_P, ctypes.c_uint, _PP], ctypes.c_int),
    ("lb_qmodel_count", [_P], ctypes.c_size_t),
    ("lb_qmodel_find", [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    ("lb_qmodel_entry", [_P, ctypes.c_size_t, ctypes.POINTER(QEntry)], ctypes.c_int),
    ("lb_qmodel_set_spec", [_P, ctypes.c_size_t, ctypes.POINTER(QSpec)], ctypes.c_int),
    ("lb_qmodel_keep", [_P, ctypes.c_size_t], ctypes.c_int),
    ("lb_qmodel_replace", [_P, ctypes.c_size_t, _P], ctypes.c_int),
    ("lb_qmodel_set_act", [_P, ctypes.c_size_t, ctypes.POINTER(QAct)], ctypes.c_int),
    ("lb_qmodel_set_input_amax", [_P, ctypes.c_size_t, ctypes.c_float], ctypes.c_int),
    ("lb_qmodel_source_f32", [_P, ctypes.c_size_t, _P], ctypes.c_int),
    ("lb_qmodel_values_f32", [_P, ctypes.c_size_t, _P, ctypes.c_int], ctypes.c_int),
    ("lb_qmodel_quantized", [_P, ctypes.c_size_t, ctypes.c_int, _PP, ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
    ("lb_qmodel_set_dtype", [_P, ctypes.c_int], ctypes.c_int),
    ("lb_qmodel_set_kv", [_P, ctypes.c_int], ctypes.c_int),
    ("lb_qmodel_set_kv_amax", [_P, ctypes.c_uint32, ctypes.c_float, ctypes.c_float], ctypes.c_int),
    ("lb_qmodel_kv_amax", [_P, ctypes.c_uint32, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_float)],
     ctypes.c_int),
    ("lb_qmodel_set_ggml", [_P, ctypes.c_size_t, ctypes.c_int], ctypes.c_int),
    ("lb_qmodel_set_imatrix", [_P, ctypes.c_size_t, _P, ctypes.c_size_t], ctypes.c_int),
    ("lb_gguf_choose", [_P, ctypes.POINTER(GGUFOptions), _P], ctypes.c_int),
    ("lb_export_gguf", [_P, ctypes.c_char_p, ctypes.POINTER(GGUFOptions), _P], ctypes.c_int),
    ("lb_qmodel_gguf_name", [_P, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
    ("lb_runner_from_qmodel", [_P, ctypes.POINTER(RunnerOptions), _PP], ctypes.c_int),
    ("lb_runner_new", [_P, ctypes.POINTER(RunnerOptions), _PP], ctypes.c_int),
    ("lb_runner_free", [_P], None), ("lb_runner_reset", [_P], None),
    ("lb_runner_forward", [_P, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, _P, ctypes.c_int], ctypes.c_int),
    ("lb_runner_vocab_size", [_P], ctypes.c_uint32),
    ("lb_calibrate", [_P, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.POINTER(CalibOptions)],
     ctypes.c_int),
]:
    if hasattr(lib, _name):
        getattr(lib, _name).argtypes = _args
        getattr(lib, _name).restype = _res


def check(st, what=""):
    assert st == LB_OK, f"{what}: {lib.lb_last_error().decode()}"


class QModel:
    """lb_model_open + lb_qmodel_new (checkpoint_flags not None:
    lb_qmodel_from_checkpoint with those flags); closes both."""

    def __init__(self, path, checkpoint_flags=None):
        self.model = ctypes.c_void_p()
        check(lib.lb_model_open(str(path).encode(), ctypes.byref(self.model)), f"open {path}")
        self.h = ctypes.c_void_p()
        if checkpoint_flags is None:
            check(lib.lb_qmodel_new(self.model, ctypes.byref(self.h)), "lb_qmodel_new")
        else:
            st = lib.lb_qmodel_from_checkpoint(self.model, checkpoint_flags, ctypes.byref(self.h))
            if st != LB_OK:
                lib.lb_model_close(self.model)
            check(st, "lb_qmodel_from_checkpoint")

    def close(self):
        lib.lb_qmodel_free(self.h)
        lib.lb_model_close(self.model)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self):
        return lib.lb_qmodel_count(self.h)

    def index(self, name):
        i = ctypes.c_size_t()
        check(lib.lb_qmodel_find(self.h, name.encode(), ctypes.byref(i)), name)
        return i.value

    def entry(self, i):
        e = QEntry()
        check(lib.lb_qmodel_entry(self.h, i, ctypes.byref(e)), "entry")
        return e

    def name(self, i):
        return self.entry(i).tensor.contents.name.decode()

    def shape(self, i):
        t = self.entry(i).tensor.contents
        return tuple(t.shape[d] for d in range(t.n_dims))

    def set_spec(self, i, text):
        st, spec = parse_spec(text)
        check(st, text)
        return lib.lb_qmodel_set_spec(self.h, i, ctypes.byref(spec))

    def set_act(self, i, mode, text):
        a = QAct(mode=mode)
        if text:
            st, a.spec = parse_spec(text)
            check(st, text)
        return lib.lb_qmodel_set_act(self.h, i, ctypes.byref(a))

    def source(self, i):
        out = np.empty(self.shape(i), dtype=np.float32)
        check(lib.lb_qmodel_source_f32(self.h, i, out.ctypes.data), "source")
        return out

    def values(self, i, threads=1):
        out = np.empty(self.shape(i), dtype=np.float32)
        check(lib.lb_qmodel_values_f32(self.h, i, out.ctypes.data, threads), "values")
        return out

    def tensor_scale(self, i):
        h, owned = ctypes.c_void_p(), ctypes.c_int()
        check(lib.lb_qmodel_quantized(self.h, i, 1, ctypes.byref(h), ctypes.byref(owned)), "quantized")
        v = QView()
        lib.lb_qtensor_view_get(h, ctypes.byref(v))
        ts = np.float32(v.tensor_scale)
        if owned.value:
            lib.lb_qtensor_free(h)
        return ts

    def calibrate(self, tokens, ctx=0, threads=2):
        toks = np.ascontiguousarray(tokens, dtype=np.int32)
        o = CalibOptions(threads=threads, ctx=ctx)
        return lib.lb_calibrate(self.h, toks.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), toks.size,
                                ctypes.byref(o))

    def runner(self, threads=2, max_ctx=0, kv=0):
        o = RunnerOptions(threads=threads, max_ctx=max_ctx, kv=kv)
        h = ctypes.c_void_p()
        st = lib.lb_runner_from_qmodel(self.h, ctypes.byref(o), ctypes.byref(h))
        return st, (Runner(h) if st == LB_OK else None)


class Runner:
    """An lb_runner handle: logits of a token sequence from position 0."""

    def __init__(self, h):
        self.h = h
        self.vocab = lib.lb_runner_vocab_size(h)

    def close(self):
        lib.lb_runner_free(self.h)

    def logits(self, tokens):
        lib.lb_runner_reset(self.h)
        toks = np.ascontiguousarray(tokens, dtype=np.int32)
        out = np.empty((toks.size, self.vocab), dtype=np.float32)
        check(lib.lb_runner_forward(self.h, toks.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), toks.size,
                                    out.ctypes.data, 0), "forward")
        return out


def class_runner(model, attn=None, mlp=None, embed=None, head=None, act=0, kv=0, threads=2, max_ctx=0):
    """lb_runner_new with class specs (qspec texts) on an open lb_model handle."""
    keep = {}
    o = RunnerOptions(threads=threads, max_ctx=max_ctx, act=act, kv=kv)
    for field, text in (("attn", attn), ("mlp", mlp), ("embed", embed), ("head", head)):
        if text:
            st, keep[field] = parse_spec(text)
            check(st, text)
            setattr(o, field, ctypes.cast(ctypes.byref(keep[field]), ctypes.c_void_p))
    h = ctypes.c_void_p()
    check(lib.lb_runner_new(model, ctypes.byref(o), ctypes.byref(h)), "lb_runner_new")
    return Runner(h)

"""GPTQ with the grids of lowbit's own weight specs (src/algo/gptq_grid.c,
through lb__gptq_spec_test), for every spec family: symmetric integers in
every lb_int_range, affine, groups (a partial last block), channel, token
and tensor granularity, fp8 e4m3/e5m2, NVFP4 and a two-level integer grid,
MXFP4/6/8 and MXINT8 with their rounding rules, the clip=mse search, and
2-D blocks. Layers of 40 x 200 (every block size leaves a partial last
block, b16xC a partial band) with outliers, a zero row, a zero block, tiny
and fp32-subnormal values.

(a) identity H: GPTQ == lb_dequantize(lb_quantize(W)), bit for bit (sign of
    zero included), with dynamic and with static groups;
(b) the tensor built from GPTQ's output: identity H, lb_quantize(W)'s bytes
    (codes, scales, zero points, tensor scale); real H, it dequantizes to
    GPTQ's output exactly;
(c) real H (correlated inputs, planted outlier channels, fixed seeds):
    GPTQ's held-out output error is below RTN's for every spec;
(d) the wiring against tests/oracle/gptq_ref.gptq (fp64) driven by a
    Python quantizer whose params() quantize the group with lowbit
    (lb__quantize_ts: lb_quantize under the fixed tensor scale) and read its
    scales back, and whose quantize() rounds in numpy/ml_dtypes from those
    scales; tolerance as test_gptq_core.py's for dynamic groups (fp32 vs fp64
    updates): at most 0.1% of the values change code, output error within 1%."""
import ctypes
import os
import sys

_saved = os.environ.get("OPENBLAS_NUM_THREADS")
os.environ["OPENBLAS_NUM_THREADS"] = "1"  # small matrices: BLAS threads only add contention
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
if _saved is None:
    del os.environ["OPENBLAS_NUM_THREADS"]
else:
    os.environ["OPENBLAS_NUM_THREADS"] = _saved
import pytest  # noqa: E402

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
import gptq_ref as G  # noqa: E402
import internal_lib  # noqa: E402
import lowbit_ctypes as lb  # noqa: E402

LB_OK, LB_ERR_NAN = 0, 3
ROWS, COLS = 40, 200
_P = ctypes.POINTER
_F = _P(ctypes.c_float)
_D = _P(ctypes.c_double)

SPECS = [
    "int4:g32",                        # range=signed, int4's default (ggml's rule, a negative scale)
    "int4:g32:range=full",
    "int4:g32:range=restricted",
    "int8:g64:range=signed",
    "uint4:g128:affine",
    "int4:g48:affine:scale=fp16",
    "int8:channel",
    "int4:token:scale=bf16:range=full",
    "int8:tensor",
    "fp8_e4m3:channel",
    "fp8_e4m3:tensor",
    "fp8_e5m2:g32",
    "nvfp4",
    "int4:g16:scale=ue4m3:twolevel",   # two-level, full-range integers
    "fp8_e4m3:channel:scale=fp16:twolevel",
    "mxfp4",
    "mxfp4:round=rceil",
    "mxfp6_e2m3:round=even",
    "mxfp8_e4m3",
    "mxint8:round=ceil",
    "int4:g64:clip=mse",
    "fp8_e4m3:channel:clip=mse",
    "int8:tensor:clip=mse",
    "fp4_e2m1:g32:scale=ue4m3:clip=mse",
    "fp8_e4m3:b16x32",
    "int8:b8x64:range=full",
]

L = internal_lib.load()
L.lb_last_error.restype = ctypes.c_char_p
for _name in ["lb_qspec_parse", "lb_quantize", "lb_dequantize", "lb_qtensor_view_get", "lb_qtensor_free"]:
    getattr(L, _name).argtypes = getattr(lb.lib, _name).argtypes
    getattr(L, _name).restype = getattr(lb.lib, _name).restype
L.lb__gptq_spec_test.restype = ctypes.c_int
L.lb__gptq_spec_test.argtypes = [ctypes.c_char_p, _F, ctypes.c_size_t, ctypes.c_size_t, _D, ctypes.c_float,
                                 ctypes.c_size_t, ctypes.c_double, ctypes.c_int, ctypes.c_int, ctypes.c_int, _D,
                                 _P(ctypes.c_void_p)]
for _name in ["lb__quantize_ts", "lb__quantize_ex"]:
    getattr(L, _name).restype = ctypes.c_int
    getattr(L, _name).argtypes = [_P(lb.QSpec), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_float, _P(ctypes.c_void_p)]


def check(st):
    if st != LB_OK:
        raise RuntimeError(f"status {st}: {L.lb_last_error().decode()}")


def spec_of(text):
    s = lb.QSpec()
    check(L.lb_qspec_parse(text.encode(), ctypes.byref(s)))
    return s


class QT:
    """A quantized tensor (of the internal library) copied out: bytes and
    dequantized values."""

    def __init__(self, handle):
        try:
            v = lb.QView()
            check(L.lb_qtensor_view_get(handle, ctypes.byref(v)))
            self.view = v
            self.data = np.ctypeslib.as_array(v.data, (v.data_bytes,)).copy()
            self.scales = np.ctypeslib.as_array(v.scales, (v.scale_bytes,)).copy()
            self.zero_points = (np.ctypeslib.as_array(v.zero_points, (v.zero_point_bytes,)).copy()
                                if v.zero_points else None)
            self.tensor_scale = np.float32(v.tensor_scale)
            self.values = np.empty((v.rows, v.cols), np.float32)
            check(L.lb_dequantize(handle, self.values.ctypes.data, 1))
        finally:
            L.lb_qtensor_free(handle)

    def same_bytes(self, other):
        return (np.array_equal(self.data, other.data) and np.array_equal(self.scales, other.scales)
                and (self.zero_points is None) == (other.zero_points is None)
                and (self.zero_points is None or np.array_equal(self.zero_points, other.zero_points))
                and self.tensor_scale.tobytes() == other.tensor_scale.tobytes())


def lb_rtn(spec, W, tensor_amax=0.0):
    """lb__quantize_ex(W) (lb_quantize when tensor_amax is 0)."""
    W = np.ascontiguousarray(W, np.float32)
    h = ctypes.c_void_p()
    check(L.lb__quantize_ex(ctypes.byref(spec_of(spec)), W.ctypes.data, W.shape[0], W.shape[1], 1, tensor_amax,
                            ctypes.byref(h)))
    return QT(h)


def c_gptq(spec, W, H, tensor_amax=0.0, block=128, damp=0.01, actorder=False, static_groups=False, threads=2):
    """(Q, QT of Q, report); H None: the grid's plain rounding."""
    w = np.array(W, dtype=np.float32, order="C")
    h = None if H is None else np.ascontiguousarray(H, dtype=np.float64)
    rep = (ctypes.c_double * 5)()
    qt = ctypes.c_void_p()
    check(L.lb__gptq_spec_test(spec.encode(), w.ctypes.data_as(_F), w.shape[0], w.shape[1],
                               None if h is None else h.ctypes.data_as(_D), tensor_amax, block, damp, int(actorder),
                               int(static_groups), threads, rep, ctypes.byref(qt)))
    return w, QT(qt), dict(damp=rep[1], retries=int(rep[2]), dead=int(rep[3]), loss=rep[4])


def weights(seed):
    """40 x 200 fp32: rows of uneven scale, outliers, a zero row, a zero
    block, a tiny row, fp32 subnormals."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((ROWS, COLS)) * rng.uniform(0.3, 3.0, (ROWS, 1))
    idx = rng.choice(ROWS * COLS, 12, replace=False)
    W.flat[idx] *= 25.0                    # outliers
    W[4] = 0.0                             # a zero channel
    W[9, 64:128] = 0.0                     # zero blocks (g32, g64) and half of a g128 one
    W[13] *= 1e-6                          # tiny
    W[17, :40] = rng.standard_normal(40) * 1e-39  # fp32 subnormals
    return W.astype(np.float32)


def layer(seed, n=400):
    """W and correlated inputs X (calibration, held-out) with a few planted
    outlier channels, so that H has structure."""
    rng = np.random.default_rng(1000 + seed)
    M = rng.standard_normal((COLS, COLS)) * 0.3 + np.eye(COLS)
    scale = rng.uniform(0.2, 2.0, COLS)
    scale[rng.choice(COLS, 4, replace=False)] *= 20.0

    def draw(k):
        return rng.standard_normal((k, COLS)) @ M * scale
    return weights(seed), draw(n), draw(256)


def bits(x):
    return np.ascontiguousarray(x, np.float32).view(np.uint32)


def out_err(X, W, Q):
    return float(np.linalg.norm(X @ (np.asarray(W, np.float64) - np.asarray(Q, np.float64)).T))


# ---------------------------------------------------------------- (a), (b): identity H == RTN

@pytest.mark.parametrize("spec", SPECS)
def test_identity_hessian_is_lb_quantize(spec):
    W = weights(1)
    rtn = lb_rtn(spec, W)
    for static in (False, True):
        Q, qt, _ = c_gptq(spec, W, np.eye(COLS), block=48, static_groups=static)
        assert np.array_equal(bits(Q), bits(rtn.values)), f"static={static}: GPTQ(I) != lb_dequantize(lb_quantize)"
        assert qt.same_bytes(rtn), f"static={static}: the tensor's bytes differ from lb_quantize's"
    Q, qt, _ = c_gptq(spec, W, None)  # the grid's own plain rounding
    assert np.array_equal(bits(Q), bits(rtn.values)) and qt.same_bytes(rtn)


@pytest.mark.parametrize("spec", ["nvfp4", "int4:g16:scale=ue4m3:twolevel"])
def test_fused_group_amax_sets_the_tensor_scale(spec):
    W = weights(2)
    amax = 3.0 * float(np.max(np.abs(W)))
    rtn = lb_rtn(spec, W, amax)
    assert rtn.tensor_scale != lb_rtn(spec, W).tensor_scale or "int4" in spec  # full range: from lo/hi alone
    Q, qt, _ = c_gptq(spec, W, np.eye(COLS), tensor_amax=amax)
    assert np.array_equal(bits(Q), bits(rtn.values)) and qt.same_bytes(rtn)


# ---------------------------------------------------------------- (b), (c): real H

@pytest.mark.parametrize("spec", SPECS)
def test_real_hessian_beats_rtn_and_tensor_round_trips(spec):
    for seed in (3, 4):
        W, X, Xt = layer(seed)
        H = G.hessian(X)
        Q, qt, _ = c_gptq(spec, W, H)
        assert np.all(np.isfinite(Q))
        assert np.array_equal(bits(qt.values), bits(Q)), "the tensor does not dequantize to GPTQ's output"
        rtn = lb_rtn(spec, W)
        eg, er = out_err(Xt, W, Q), out_err(Xt, W, rtn.values)
        assert eg < er, f"seed {seed}: GPTQ {eg:.4g} >= RTN {er:.4g}"


def test_actorder_static_groups_round_trip():
    W, X, Xt = layer(5)
    H = G.hessian(X)
    for spec in ("int4:g32", "nvfp4", "mxfp4", "uint4:g128:affine", "fp8_e4m3:b16x32"):
        Q, qt, _ = c_gptq(spec, W, H, actorder=True, static_groups=True)
        assert np.array_equal(bits(qt.values), bits(Q))
        assert out_err(Xt, W, Q) < out_err(Xt, W, lb_rtn(spec, W).values)


def test_threads_do_not_change_the_result():
    W, X, _ = layer(6)
    H = G.hessian(X)
    for spec in ("int4:g32", "nvfp4", "int8:channel"):
        q1, t1, _ = c_gptq(spec, W, H, block=32, threads=1)
        q2, t2, _ = c_gptq(spec, W, H, block=32, threads=2)
        assert np.array_equal(bits(q1), bits(q2)) and t1.same_bytes(t2)


def test_every_isa_gives_lb_quantize_bytes():
    """round() and the final tensor under each instruction set this CPU runs
    (scalar included) against lb_quantize under the best one."""
    W, X, _ = layer(10)
    H = G.hessian(X)
    specs = ["int4:g32", "uint4:g128:affine", "fp8_e4m3:channel", "nvfp4", "mxfp6_e3m2", "int4:g64:clip=mse"]
    best = L.lb_isa_active()
    ref = {s: lb_rtn(s, W) for s in specs}
    try:
        for isa in lb.isas():
            check(L.lb_isa_set(isa))
            for s in specs:
                Q, qt, _ = c_gptq(s, W, np.eye(COLS))
                assert np.array_equal(bits(Q), bits(ref[s].values)) and qt.same_bytes(ref[s]), (isa, s)
                # (a real H's result differs across ISAs by the solver's reordered sums: not compared)
                Q, qt, _ = c_gptq(s, W, H)
                assert np.array_equal(bits(qt.values), bits(Q)), (isa, s)
    finally:
        L.lb_isa_set(best)


def test_nonfinite_weight_is_refused():
    W = weights(7)
    W[2, 5] = np.nan
    for spec in ("nvfp4", "int4:g32", "fp8_e4m3:tensor"):
        w = W.copy()
        st = L.lb__gptq_spec_test(spec.encode(), w.ctypes.data_as(_F), ROWS, COLS,
                                  np.eye(COLS).ctypes.data_as(_D), 0.0, 128, 0.01, 0, 0, 1, None, None)
        assert st == LB_ERR_NAN


# ---------------------------------------------------------------- (d): against the numpy oracle

_ELEM = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2,
         "fp6_e2m3": ml_dtypes.float6_e2m3fn, "fp6_e3m2": ml_dtypes.float6_e3m2fn, "fp4_e2m1": ml_dtypes.float4_e2m1fn}


def _fmt(fid):
    return lb.lib.lb_format_get(fid).contents


def _scale_values(fmt, raw, n):
    """n decoded scale codes from their bytes (float32)"""
    if fmt == "fp32":
        return raw.view(np.float32)[:n]
    if fmt == "fp16":
        return raw.view(np.float16)[:n].astype(np.float32)
    if fmt == "bf16":
        return raw.view(ml_dtypes.bfloat16)[:n].astype(np.float32)
    if fmt == "ue4m3":
        return raw.view(ml_dtypes.float8_e4m3fn)[:n].astype(np.float32)
    assert fmt == "e8m0"
    return np.ldexp(np.float32(1), raw[:n].astype(np.int32) - 127).astype(np.float32)  # code 0: 2^-127


class LowbitQuantizer:
    """gptq_ref's quantizer interface over lowbit: params() = the scales
    lb_quantize chooses for the group (under the tensor scale fixed by
    bind), quantize() = x / d + zp, clamped, rounded to the element
    (np.rint or ml_dtypes), then (v - zp) d, in fp32."""

    def __init__(self, text, ts=None, whole=None):
        self.text, self.spec = text, spec_of(text)
        s = self.spec
        self.group = s.group if s.granularity == 3 else None
        self.ts, self.whole = ts, whole
        el = _fmt(s.element)
        self.el_name, self.sf_name = el.name.decode(), _fmt(s.scale_format).name.decode()
        self.is_int = el.kind == _fmt(lb.FORMATS["int8"]).kind
        full = self.is_int and not s.affine and self.sf_name != "e8m0" and s.range in (0, 2)
        if s.affine or full:
            self.lo, self.hi = np.float32(el.min_finite), np.float32(el.max_finite)
        else:
            self.lo, self.hi = -np.float32(el.max_finite), np.float32(el.max_finite)
        self.mul = (np.float32(2.0 ** -6) if s.int_frac_bits else np.float32(1))

    def bind(self, W):
        W32 = np.ascontiguousarray(W, np.float32)
        if not self.spec.two_level and self.spec.granularity != 0:
            return self
        t = lb_rtn(self.text, W32)
        q = LowbitQuantizer(self.text, ts=t.tensor_scale)
        if self.spec.granularity == 0:  # per tensor: the one scale, every row
            q.whole = self._scales(t, W32.shape[0])
        return q

    def _scales(self, t, rows):
        v = t.view
        vals = _scale_values(self.sf_name, t.scales, v.scale_count)
        div = vals * (self.ts if self.spec.two_level else self.mul)
        zp = np.zeros(v.scale_count, np.float32)
        if t.zero_points is not None:
            el = _fmt(self.spec.element)
            rows_zp = t.zero_points.reshape(-1, v.zero_point_row_bytes)
            z = (rows_zp[:, 0] & 0xF) if el.bits == 4 else rows_zp[:, 0]
            z = z.astype(np.int64)
            if el.sign_bits:
                z = np.where(z >= 1 << (el.bits - 1), z - (1 << el.bits), z)
            zp = z.astype(np.float32)
        idx = (np.arange(rows) // max(1, v.spec.group_rows)) if v.scale_count > 1 else np.zeros(rows, int)
        return div[idx].astype(np.float32), zp[idx]

    def params(self, Wg):
        if self.whole is not None:
            return self.whole
        x = np.ascontiguousarray(Wg, np.float32)
        h = ctypes.c_void_p()
        check(L.lb__quantize_ts(ctypes.byref(self.spec), x.ctypes.data, x.shape[0], x.shape[1], 1,
                                self.ts if self.ts is not None else 1.0, ctypes.byref(h)))
        return self._scales(QT(h), x.shape[0])

    def quantize(self, col, p):
        div, zp = p
        x = np.asarray(col, np.float32)
        add = zp if self.spec.affine else np.float32(-0.0)
        with np.errstate(over="ignore"):  # a value over a subnormal scale: inf, clamped like the C code
            y = np.clip(x / np.where(div != 0, div, np.float32(1)) + add, self.lo, self.hi).astype(np.float32)
        # an integer code decodes to +0, never -0 (np.rint(-0.1) is -0)
        v = np.rint(y) + np.float32(0) if self.is_int else y.astype(_ELEM[self.el_name]).astype(np.float32)
        sub = zp if self.spec.affine else np.float32(0)
        return ((v - sub) * div).astype(np.float64)


def flips(Qc, Qo):
    """values whose code differs (beyond fp32 scale noise of 1e-5 relative)"""
    return int(np.sum(np.abs(Qc - Qo) > 1e-5 * np.abs(Qo)))


def test_python_quantizer_is_lb_quantize():
    """The oracle's quantizer itself: rtn with it is lb_quantize's RTN."""
    W = weights(8)
    for spec in SPECS:
        Qo = G.rtn(np.asarray(W, np.float64), LowbitQuantizer(spec))
        assert np.array_equal(bits(Qo.astype(np.float32)), bits(lb_rtn(spec, W).values)), spec


@pytest.mark.parametrize("spec", SPECS)
def test_matches_oracle(spec):
    W, X, _ = layer(9)
    H = G.hessian(X)
    runs = [dict(block=32)]
    if SPECS.index(spec) % 3 == 0:
        runs.append(dict(block=7, actorder=True, static_groups=True))
    for kw in runs:
        Qo, info = G.gptq(np.asarray(W, np.float64), H, LowbitQuantizer(spec), **kw)
        Qc, _, rep = c_gptq(spec, W, H, **kw)
        n_flip = flips(Qc, Qo)
        assert n_flip <= Qc.size // 1000, f"{kw}: {n_flip} of {Qc.size} values changed code"
        eo, ec = out_err(X, W, Qo), out_err(X, W, Qc)
        assert abs(ec - eo) <= 0.01 * eo, (kw, ec, eo)
        assert rep["loss"] == pytest.approx(info["loss"], rel=1e-3)
        if kw.get("static_groups") and n_flip == 0:  # scales from the same fp32 W: no fp32/fp64 difference
            assert np.array_equal(bits(Qc), bits(Qo.astype(np.float32))), f"{kw}: Q should be float32(oracle Q)"

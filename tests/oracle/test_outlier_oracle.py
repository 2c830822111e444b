"""SmoothQuant's scales and AWQ's two searches (src/algo/smoothquant.h,
awq.h) against the numpy references of outlier_ref.py (papers and
variants cited there), and those references checked on their own.

The AWQ searches take the weight's quantizer as a callback (lb__fakeq_fn);
here it is numpy (outlier_ref.fq_*), so both sides quantize with the SAME
function and only the searches are compared. The callback also records
what the C hands it, which splits each comparison in two:
  - the quantizer's inputs: fl(W diag(s_k)) (the scale search) or W
    clamped to the k-th candidates (the clipping search) must match the
    reference's s_k / candidates to 1e-5 relative (float32 against float64
    arithmetic: a few ulps), which checks the scale formula at every grid
    point, not only the chosen one;
  - the errors, recomputed in float64 from exactly those inputs ("replay"),
    must match the C's to 1e-4 relative. The C may accumulate in float32:
    a dot product of n terms of random sign is off by about sqrt(n) eps ~
    1e-6 relative, or ~1e-5 when it is formed as x.Q(W) - x.W (int4 errors
    are ~1/10 of the outputs); 1e-4 leaves a margin and still catches any
    formula change (a wrong normaliser, a missing 1/s, a mean over the
    wrong count are all >= 1e-2).
  - the reference's own, fully independent errors must match to 1e-3: an
    s that differs by one ulp can move one rounding of one weight across a
    code boundary, which moves the error of a whole grid point by ~1e-3.
The chosen grid point / clip candidate must be the reference's, except
where the two errors are a tie within 1e-4 (reported by the assertion).

The C comparisons skip only while the C functions are the stubs: AWQ's
return LB_ERR_UNSUPPORTED; lb__smoothquant_scales returns nothing, and
its stub writes s = 1 everywhere, so it counts as a stub when a probe whose
every channel should be far from 1 comes back all 1."""
import ctypes
import os
import sys
import traceback

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import internal_lib  # noqa: E402
import lowbit_ctypes as lb  # noqa: E402
import outlier_ref as R  # noqa: E402

F32, F64 = np.float32, np.float64
LB_ERR_NAN, LB_ERR_UNSUPPORTED = 3, 7
SCALE_INPUT_RTOL = 1e-5
ERR_RTOL = 1e-4
INDEPENDENT_RTOL = 1e-3

FAKEQ = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t,
                         ctypes.c_size_t)
QUANTIZERS = {
    "sym": R.fq_int4_sym,
    "asym": R.fq_int4_asym,
    "lowbit": R.fq_lowbit_int4,
    "asym64": lambda w: R.fq_int4_asym(w, 64),
    "sym64": lambda w: R.fq_int4_sym(w, 64),
}


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


# ---------------------------------------------------------------- the C side

def c_lib():
    lib = internal_lib.load()
    f = lib.lb__smoothquant_scales
    f.restype = None
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_float, ctypes.c_void_p]
    f = lib.lb__awq_search_scale
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t, ctypes.c_size_t,
                  ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int, FAKEQ,
                  ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                  ctypes.c_int]
    f = lib.lb__awq_search_clip
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p,
                  ctypes.c_size_t, ctypes.c_int, ctypes.c_float, FAKEQ, ctypes.c_void_p, ctypes.c_void_p,
                  ctypes.c_int]
    lib.lb_last_error.restype = ctypes.c_char_p
    return lib


class Recorder:
    """The numpy quantizers behind one C callback: ctx k (1-based) picks
    fns[k - 1]; every call's input is kept. A Python exception becomes
    LB_ERR_ARG (ctypes would otherwise return 0, LB_OK) and is re-raised
    by check(); fail_with makes every call return that status."""

    def __init__(self, fns, fail_with=0):
        self.fns, self.fail_with = fns, fail_with
        self.calls, self.errors = [], []
        self.cfn = FAKEQ(self._call)

    def _call(self, ctx, w, rows, cols):
        try:
            if self.fail_with:
                return self.fail_with
            a = np.ctypeslib.as_array(w, (rows, cols))
            fq = self.fns[(ctx or 0) - 1]
            inp = a.copy()
            self.calls.append(((ctx or 0) - 1, inp))
            a[...] = fq(inp)
            return lb.LB_OK
        except Exception:  # noqa: BLE001 -- any failure must reach the test, not vanish in ctypes
            self.errors.append(traceback.format_exc())
            return lb.LB_ERR_ARG

    def check(self):
        assert not self.errors, self.errors[0]


def c_search_scale(w, member_rows, qnames, x, x_mean, grid, threads=1, want_err=True, fail_with=0):
    lib = c_lib()
    rec = Recorder([QUANTIZERS[q] for q in qnames], fail_with)
    w, x, x_mean = (np.ascontiguousarray(a, F32) for a in (w, x, x_mean))
    cols = w.shape[1]
    mr = (ctypes.c_size_t * len(member_rows))(*member_rows)
    ctx = (ctypes.c_void_p * len(member_rows))(*range(1, len(member_rows) + 1))
    s = np.full(cols, np.nan, F32)
    err = np.full(grid, np.nan, F64)
    best = ctypes.c_int(-1)
    st = lib.lb__awq_search_scale(ptr(w), mr, len(member_rows), cols, ptr(x), x.shape[0], ptr(x_mean), grid,
                                  rec.cfn, ctx, ptr(s), ptr(err) if want_err else None, ctypes.byref(best),
                                  threads)
    if st == LB_ERR_UNSUPPORTED:
        pytest.skip("lb__awq_search_scale is still the stub (LB_ERR_UNSUPPORTED)")
    rec.check()
    return st, s, err, best.value, rec


def c_search_clip(w, group, x, qname, grid, max_shrink, threads=1, fail_with=0):
    lib = c_lib()
    rec = Recorder([QUANTIZERS[qname]], fail_with)
    w, x = (np.ascontiguousarray(a, F32) for a in (w, x))
    rows, cols = w.shape
    clip = np.full((rows, -(-cols // group)), np.nan, F32)
    st = lib.lb__awq_search_clip(ptr(w), rows, cols, group, ptr(x), x.shape[0], grid, max_shrink, rec.cfn, 1,
                                 ptr(clip), threads)
    if st == LB_ERR_UNSUPPORTED:
        pytest.skip("lb__awq_search_clip is still the stub (LB_ERR_UNSUPPORTED)")
    rec.check()
    return st, clip, rec


def c_smooth_scales(x_absmax, w_absmax, alpha):
    lib = c_lib()
    x, w = (np.ascontiguousarray(a, F32) for a in (x_absmax, w_absmax))
    s = np.full(x.size, np.nan, F32)
    lib.lb__smoothquant_scales(ptr(x), ptr(w), x.size, alpha, ptr(s))
    return s


def skip_if_smooth_stub():
    probe = c_smooth_scales([4.0, 9.0, 0.25, 100.0], [1.0, 1.0, 1.0, 4.0], 0.5)  # 2, 3, 0.5, 5
    if np.all(probe == 1.0):
        pytest.skip("lb__smoothquant_scales is still the stub (s = 1 on a probe that wants 2, 3, 0.5, 5)")


# ---------------------------------------------------------------- inputs

def planted(seed, rows, cols, n, outliers=4, factor=20.0, dead=0):
    """W ~ N(0, 0.02); X ~ N(0, 1) with `outliers` input channels times
    `factor` (the salient channels AWQ protects) and `dead` channels 0;
    x_mean from 4n tokens, x the first n of them."""
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((4 * n, cols))
    ch = rng.choice(cols, outliers + dead, replace=False)
    xs[:, ch[:outliers]] *= factor
    xs[:, ch[outliers:]] = 0.0
    xs = xs.astype(F32)
    w = (rng.standard_normal((rows, cols)) * 0.02).astype(F32)
    x_mean = np.abs(xs.astype(F64)).mean(axis=0).astype(F32)
    return w, xs[:n].copy(), x_mean


def rel_close(a, b, rtol, atol=0.0):
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    return np.abs(a - b) <= rtol * np.abs(b) + atol


# ---------------------------------------------------------------- the references on their own

@pytest.mark.parametrize("group", [128, 64, 32, 7])
def test_lowbit_int4_reference_is_bit_exact_with_lb_quantize(group):
    rng = np.random.default_rng(group)
    for cols in (1, 7, 128, 200, 300):
        x = (rng.standard_normal((12, cols)) * np.exp(rng.uniform(-6, 6, (12, 1)))).astype(F32)
        x[1] = 0.0                       # an all-zero row: scale 0
        x[2] = np.abs(x[2])              # positive only: m = hi, s < 0
        x[3] = -np.abs(x[3])             # negative only
        x[4, :] = np.where(np.arange(cols) % 2, 1.0, -1.0)  # a tie of magnitudes: the negative one
        x[5] = np.rint(x[5] * 4) / 4 * 8  # codes on half steps
        st, q = lb.quantize(f"int4:g{group}", x)
        assert st == lb.LB_OK, lb.last_error()
        ref = R.fq_lowbit_int4(x, group)
        assert np.array_equal(ref, q.dequantized), (cols, np.argwhere(ref != q.dequantized)[:5])


def test_quantizer_references_by_hand():
    w = np.array([[0.7, -0.35, 0.1, 0.0]], F32)
    # sym: d = 0.7/7 = 0.1 -> codes 7, -3.5 -> -4 (even), 1, 0
    assert np.allclose(R.fq_int4_sym(w), [[0.7, -0.4, 0.1, 0.0]], rtol=1e-6)
    # asym: d = 1.05/15 = 0.07, z = rne(0.35/0.07) = 5; 0.1/0.07 = 1.43 -> 1
    assert np.allclose(R.fq_int4_asym(w), [[0.7, -0.35, 0.07, 0.0]], rtol=1e-5)
    # lowbit signed: m = 0.7 (hi wins), d = -0.0875; 0.7 -> -8, -0.35 -> 4, 0.1 -> -1.14 -> -1
    assert np.allclose(R.fq_lowbit_int4(w), [[0.7, -0.35, 0.0875, 0.0]], rtol=1e-6)


def test_smoothquant_reference_moves_the_maxima_as_the_paper_says():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 48)) * np.exp(rng.uniform(-2, 4, 48))
    w = rng.standard_normal((96, 48)) * 0.05
    xa, wa = np.abs(x).max(0), np.abs(w).max(0)
    for alpha in (0.0, 0.3, 0.5, 0.8, 1.0):
        s = R.smoothquant_scales(xa, wa, alpha)
        assert np.allclose((x / s) @ (w * s).T, x @ w.T, rtol=1e-9, atol=1e-12)  # an equivalence
        # max|X_j / s_j| = max|X_j|^(1-a) max|W_j|^(1-a) and max|W_j s_j| = max|X_j|^a max|W_j|^a
        assert np.allclose(np.abs(x / s).max(0), (xa * wa) ** (1 - alpha), rtol=1e-12)
        assert np.allclose(np.abs(w * s).max(0), (xa * wa) ** alpha, rtol=1e-12)
    s = R.smoothquant_scales([0.0, 5.0, np.inf, np.nan, 1e12, 1e-12], [1.0, 0.0, 1.0, 1.0, 1e-3, 1e3], 0.5)
    assert list(s) == [1.0, 1.0, 1.0, 1.0, 1e5, 1e-5]


def brute_force_scale_error(w, member_rows, fqs, x, s):
    """err of one grid point with explicit loops (the vectorised code's twin)."""
    deq = []
    r = 0
    for rows, fq in zip(member_rows, fqs):
        q = fq(R.scaled_weight(w[r:r + rows], s))
        deq += [[float(q[i, j]) / float(s[j]) for j in range(w.shape[1])] for i in range(rows)]
        r += rows
    total, count = 0.0, 0
    for xi in x:
        for wi, qi in zip(w, deq):
            e = sum(float(xi[j]) * (qi[j] - float(wi[j])) for j in range(w.shape[1]))
            total += e * e
            count += 1
    return total / count


def test_awq_scale_reference_error_equals_a_loop():
    w, x, xm = planted(5, rows=6, cols=20, n=5, outliers=2)
    fqs = [lambda a: R.fq_int4_sym(a, 8), lambda a: R.fq_int4_asym(a, 8)]
    cand = R.awq_scale_candidates(xm, 10)
    for k in (0, 3, 9):
        want = brute_force_scale_error(w, [4, 2], fqs, x, cand[k])
        assert R.awq_grid_error(w, [4, 2], fqs, x, cand[k]) == pytest.approx(want, rel=1e-12)
    assert np.all(cand[0] == 1.0)  # alpha 0: no scaling
    assert np.allclose(cand.max(1) * cand.min(1), 1.0)  # the normalisation


@pytest.mark.parametrize("qname", ["sym", "asym", "lowbit"])
def test_awq_scale_reference_lowers_the_error_on_planted_outliers(qname):
    for seed in range(3):
        w, x, xm = planted(seed, rows=192, cols=256, n=64)
        _, err, best = R.awq_search_scale(w, [96, 64, 32], [QUANTIZERS[qname]] * 3, x, xm)
        assert best > 0 and err[best] < 0.6 * err[0], (seed, err)
        # ...and on data without outliers it gains far less
        w, x, xm = planted(seed, rows=192, cols=256, n=64, outliers=0)
        _, err2, best2 = R.awq_search_scale(w, [192], [QUANTIZERS[qname]], x, xm)
        assert err2[best2] > 0.8 * err2[0]


def test_awq_clip_reference_never_worse_than_no_clipping_and_equals_a_loop():
    w, x, _ = planted(3, rows=16, cols=200, n=32)
    w[2, 128:] = 0.0  # an all-zero group
    clip, err, best = R.awq_search_clip(w, 128, x, R.fq_int4_sym)
    assert np.all(err[best, np.arange(16)[:, None], np.arange(2)] <= err[0])
    assert np.all(clip[2, 1] == 0.0) and np.any(best > 0)
    m = R.group_absmax(w, 128)
    for row, g in [(0, 0), (5, 1), (11, 0), (2, 1)]:
        a, b = g * 128, min(g * 128 + 128, 200)
        for k in range(10):
            c = float(m[row, g]) * (1 - k / 20)
            blk = np.clip(w[row:row + 1, a:b], -c, c).astype(F32)
            d = R.fq_int4_sym(blk).astype(F64) - w[row:row + 1, a:b]
            e = np.mean([float(xi[a:b].astype(F64) @ d[0]) ** 2 for xi in x])
            assert err[k, row, g] == pytest.approx(e, rel=1e-9, abs=1e-30)
        assert clip[row, g] == R.clip_candidates(m, 20, 0.5)[best[row, g], row, g]


# ---------------------------------------------------------------- SmoothQuant against the C

def test_smoothquant_scales_match_c():
    skip_if_smooth_stub()
    rng = np.random.default_rng(7)
    n = 4096
    x = np.exp(rng.uniform(np.log(1e-6), np.log(1e6), n)).astype(F32)
    w = np.exp(rng.uniform(np.log(1e-6), np.log(1e2), n)).astype(F32)
    x[:8], w[8:16] = 0.0, 0.0                              # zero channels
    x[16], w[17], x[18], w[19] = np.inf, np.inf, np.nan, np.nan
    x[20], w[20] = 0.0, 0.0
    x[21], w[21] = 1e30, 1e-30                             # s far above the clamp
    x[22], w[22] = 1e-30, 1e30                             # far below
    x[23], w[23] = np.float32(1e-45), 1.0                  # a subnormal activation maximum
    for alpha in (0.0, 0.25, 0.5, 0.8, 1.0):
        got = c_smooth_scales(x, w, alpha)
        want = R.smoothquant_scales(x.astype(F64), w.astype(F64), float(F32(alpha)))
        bad = ~rel_close(got, want, 1e-5)
        assert not bad.any(), (alpha, [(float(x[i]), float(w[i]), float(got[i]), float(want[i]))
                                       for i in np.flatnonzero(bad)[:6]])
        assert np.all(got[:16] == 1.0) and np.all(got[16:21] == 1.0)


# ---------------------------------------------------------------- AWQ scale search against the C

SCALE_CASES = [  # id, seed, member_rows, quantizers, cols, n, grid, planted kwargs
    ("qkv-mixed-quantizers", 0, [96, 64, 32], ["sym", "asym", "lowbit"], 256, 64, 20, {}),
    ("qkv-lowbit", 1, [64, 32, 32], ["lowbit"] * 3, 256, 48, 20, {}),
    ("gate-up-cols200", 2, [64, 64], ["sym", "sym"], 200, 40, 20, {}),
    ("o-cols384-no-outliers", 3, [128], ["lowbit"], 384, 32, 20, {"outliers": 0}),
    ("down-asym-dead-channels", 4, [80], ["asym"], 320, 64, 20, {"dead": 3, "factor": 50.0}),
    ("grid10-g64", 5, [48, 48], ["sym64", "asym64"], 192, 24, 10, {}),
]


def identify_scale_calls(rec, w, member_rows, cand):
    """{(member, k): quantizer input}, each checked against fl(W_m s_k)."""
    starts = np.concatenate([[0], np.cumsum(member_rows)])
    got = {}
    for m, inp in rec.calls:
        wm = w[starts[m]:starts[m + 1]]
        assert inp.shape == wm.shape, (m, inp.shape, wm.shape)
        match = [k for k in range(len(cand)) if (m, k) not in got and
                 np.all(rel_close(inp, R.scaled_weight(wm, cand[k]), SCALE_INPUT_RTOL, 1e-30))]
        if not match:
            k = int(np.argmin([np.abs(inp - R.scaled_weight(wm, c)).max() for c in cand]))
            want = R.scaled_weight(wm, cand[k])
            i = np.unravel_index(np.argmax(np.abs(inp - want) / (np.abs(want) + 1e-30)), want.shape)
            raise AssertionError(f"member {m}: the quantizer's input matches no fl(W s_k); nearest k={k}, "
                                 f"at {i}: C {inp[i]!r} vs reference {want[i]!r} (s_k = {cand[k][i[1]]!r})")
        got[(m, match[0])] = inp
    want_keys = {(m, k) for m in range(len(member_rows)) for k in range(len(cand))}
    assert set(got) == want_keys, f"calls missing for {sorted(want_keys - set(got))[:5]}"
    assert len(rec.calls) == len(want_keys), f"{len(rec.calls)} quantizer calls, want {len(want_keys)}"
    return got


@pytest.mark.parametrize("case", SCALE_CASES, ids=[c[0] for c in SCALE_CASES])
def test_awq_search_scale_matches_the_reference(case):
    _, seed, member_rows, qnames, cols, n, grid, kw = case
    w, x, xm = planted(seed, sum(member_rows), cols, n, **kw)
    st, s, err, best, rec = c_search_scale(w, member_rows, qnames, x, xm, grid)
    assert st == lb.LB_OK, c_lib().lb_last_error()
    fqs = [QUANTIZERS[q] for q in qnames]
    cand = R.awq_scale_candidates(xm, grid)
    inputs = identify_scale_calls(rec, w, member_rows, cand)

    # the errors replayed from the C's own quantizer inputs
    replay = np.empty(grid)
    for k in range(grid):
        deq = np.concatenate([fqs[m](inputs[(m, k)]).astype(F64) / cand[k] for m in range(len(member_rows))])
        replay[k] = R.output_error(x, deq, w)
    bad = ~rel_close(err, replay, ERR_RTOL)
    assert not bad.any(), [(k, err[k], replay[k]) for k in np.flatnonzero(bad)]

    # the reference on its own
    s_ref, err_ref, best_ref = R.awq_search_scale(w, member_rows, fqs, x, xm, grid)
    bad = ~rel_close(err, err_ref, INDEPENDENT_RTOL)
    assert not bad.any(), [(k, err[k], err_ref[k]) for k in np.flatnonzero(bad)]

    # the choice: the first minimum of the C's errors, the reference's unless a tie
    assert best == int(np.argmin(err)), (best, err)
    assert best == best_ref or err_ref[best] <= err_ref[best_ref] * (1 + ERR_RTOL), \
        f"C chose k={best} (err {err[best]!r}, reference {err_ref[best]!r}), reference k={best_ref} " \
        f"(err {err_ref[best_ref]!r}, C {err[best_ref]!r})"
    assert np.all(rel_close(s, cand[best], SCALE_INPUT_RTOL)), np.abs(s / cand[best] - 1).max()
    if not kw.get("outliers", 4) == 0:
        assert best > 0 and err[best] < 0.7 * err[0]


def test_awq_search_scale_threads_and_optional_err_change_nothing():
    w, x, xm = planted(11, 160, 256, 48)
    _, s1, err1, best1, _ = c_search_scale(w, [96, 64], ["lowbit", "sym"], x, xm, 20, threads=1)
    _, s2, err2, best2, _ = c_search_scale(w, [96, 64], ["lowbit", "sym"], x, xm, 20, threads=2)
    st, s3, _, best3, _ = c_search_scale(w, [96, 64], ["lowbit", "sym"], x, xm, 20, threads=1, want_err=False)
    assert st == lb.LB_OK
    assert best1 == best2 == best3 and np.array_equal(s1, s2) and np.array_equal(s1, s3)
    assert np.all(rel_close(err2, err1, ERR_RTOL))


SCALE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t)


def test_awq_search_scale_ex_tells_each_member_its_s_before_quantizing_it():
    # awq.h: on_scale(qctx[k], s, cols) for every member before it is quantized at each grid point
    lib = c_lib()
    if not hasattr(lib, "lb__awq_search_scale_ex"):
        pytest.skip("no lb__awq_search_scale_ex in this build")
    f = lib.lb__awq_search_scale_ex
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t, ctypes.c_size_t,
                  ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int, FAKEQ,
                  ctypes.POINTER(ctypes.c_void_p), SCALE_FN, ctypes.c_void_p, ctypes.c_void_p,
                  ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    member_rows, grid = [48, 32], 20
    w, x, xm = planted(14, sum(member_rows), 200, 24)
    rec = Recorder([R.fq_int4_sym, R.fq_lowbit_int4])
    told = {}  # member -> the last s it was told
    events = []

    def on_scale(ctx, sp, cols):
        told[(ctx or 0) - 1] = np.ctypeslib.as_array(sp, (cols,)).astype(F64)
    cb = SCALE_FN(on_scale)
    inner = rec.cfn

    def q(ctx, wp, rows, cols):
        m = (ctx or 0) - 1
        events.append((m, None if m not in told else told[m].copy()))
        return inner(ctx, wp, rows, cols)
    qf = FAKEQ(q)
    mr = (ctypes.c_size_t * 2)(*member_rows)
    ctx = (ctypes.c_void_p * 2)(1, 2)
    s, err, best = np.zeros(200, F32), np.zeros(grid), ctypes.c_int(-1)
    st = f(ptr(w), mr, 2, 200, ptr(x), x.shape[0], ptr(xm), grid, qf, ctx, cb, ptr(s), ptr(err), ctypes.byref(best), 1)
    if st == LB_ERR_UNSUPPORTED:
        pytest.skip("lb__awq_search_scale_ex is still the stub (LB_ERR_UNSUPPORTED)")
    rec.check()
    assert st == lb.LB_OK
    cand = R.awq_scale_candidates(xm, grid)
    inputs = identify_scale_calls(rec, w, member_rows, cand)
    by_input = {id(v): key for key, v in inputs.items()}
    for (m, s_told), (_, inp) in zip(events, rec.calls):
        _, k = by_input[id(inp)]
        assert s_told is not None and np.all(rel_close(s_told, cand[k], SCALE_INPUT_RTOL)), (m, k)
    _, s2, err2, best2, _ = c_search_scale(w, member_rows, ["sym", "lowbit"], x, xm, grid)
    assert best.value == best2 and np.array_equal(s, s2) and np.array_equal(err, err2)


def test_awq_search_scale_equal_errors_take_the_first():
    # x_mean constant: every grid point's s is 1 after the normalisation (sqrt(v v) = v exactly in
    # IEEE arithmetic), so every error is the same and k = 0 must win
    w, x, _ = planted(13, 64, 256, 16)
    xm = np.full(256, 0.37, F32)
    st, s, err, best, _ = c_search_scale(w, [32, 32], ["sym", "lowbit"], x, xm, 20)
    assert st == lb.LB_OK
    assert np.all(err == err[0]) and best == 0 and np.all(s == 1.0), (best, err[:3], s[:3])


def test_awq_search_scale_a_failing_quantizer_stops_it():
    w, x, xm = planted(12, 64, 128, 16)
    st, *_ = c_search_scale(w, [64], ["sym"], x, xm, 20, fail_with=LB_ERR_NAN)
    assert st != lb.LB_OK


# ---------------------------------------------------------------- AWQ clipping search against the C

CLIP_CASES = [  # id, seed, rows, cols, group, quantizer, grid, max_shrink, planted kwargs
    ("sym-g128", 20, 64, 256, 128, "sym", 20, 0.5, {}),
    ("lowbit-g128-cols200", 21, 48, 200, 128, "lowbit", 20, 0.5, {}),
    ("asym-g128-cols300", 22, 40, 300, 128, "asym", 20, 0.5, {}),
    ("asym-g64", 23, 32, 192, 64, "asym64", 20, 0.5, {"outliers": 0}),
    ("sym-g64-grid16-quarter", 24, 32, 160, 64, "sym64", 16, 0.25, {}),
]


def identify_clip_calls(rec, w, group, cand):
    got = {}
    for _, inp in rec.calls:
        assert inp.shape == w.shape, (inp.shape, w.shape)
        match = [k for k in range(len(cand)) if k not in got and
                 np.all(rel_close(inp, R.clamp_groups(w, cand[k], group), 1e-6, 1e-30))]
        if not match:
            k = int(np.argmin([np.abs(inp - R.clamp_groups(w, c, group)).max() for c in cand]))
            want = R.clamp_groups(w, cand[k], group)
            i = np.unravel_index(np.argmax(np.abs(inp - want)), want.shape)
            raise AssertionError(f"the quantizer's input matches no clamped weight; nearest k={k}, at {i}: "
                                 f"C {inp[i]!r} vs reference {want[i]!r} (w {w[i]!r})")
        got[match[0]] = inp
    assert sorted(got) == list(range(len(cand))) and len(rec.calls) == len(cand), \
        f"{len(rec.calls)} quantizer calls for candidates {sorted(got)}, want {len(cand)}"
    return got


@pytest.mark.parametrize("case", CLIP_CASES, ids=[c[0] for c in CLIP_CASES])
def test_awq_search_clip_matches_the_reference(case):
    _, seed, rows, cols, group, qname, grid, max_shrink, kw = case
    w, x, _ = planted(seed, rows, cols, 64, **kw)
    w[3, :group] = 0.0  # an all-zero group: every candidate 0
    fq = QUANTIZERS[qname]
    st, clip, rec = c_search_clip(w, group, x, qname, grid, max_shrink)
    assert st == lb.LB_OK, c_lib().lb_last_error()
    m = R.group_absmax(w, group)
    cand = R.clip_candidates(m, grid, max_shrink)
    inputs = identify_clip_calls(rec, w, group, cand)
    replay = np.stack([R.group_errors(w, fq(inputs[k]), x, group) for k in range(len(cand))])

    clip_ref, err_ref, best_ref = R.awq_search_clip(w, group, x, fq, grid, max_shrink)
    assert np.all(clip[3, 0] == 0.0)
    # the C's clip as a candidate index (candidates are ulps apart at most between float and double products)
    k_c = np.argmin(np.abs(cand - clip[None]), axis=0)
    on_grid = rel_close(clip, np.take_along_axis(cand, k_c[None], 0)[0], 1e-6)
    assert on_grid.all(), [(r, g, clip[r, g]) for r, g in np.argwhere(~on_grid)[:5]]
    # Where a candidate differs from the reference's by an ulp (m (1 - k/grid) rounded once in float32,
    # or in double then to float32) the quantizer may round differently: a group clamped to [-c, c] has
    # min = -max, so an asymmetric zero point -min / d = 7.5 sits on a tie and one ulp flips it, moving
    # the group's error by percents. There the replay alone binds; elsewhere the reference does too.
    same = np.ones(clip.shape, bool)
    for k in range(len(cand)):
        diff = inputs[k] != R.clamp_groups(w, cand[k], group)
        same &= ~np.stack([diff[:, a:a + group].any(axis=1) for a in range(0, cols, group)], axis=1)
    for name, e, binding in (("replay", replay, np.ones(clip.shape, bool)), ("reference", err_ref, same)):
        e_c = np.take_along_axis(e, k_c[None], 0)[0]
        ok = (k_c == np.argmin(e, axis=0)) | (e_c <= e.min(axis=0) * (1 + ERR_RTOL) + 1e-30) | ~binding
        assert ok.all(), [(name, int(r), int(g), "C k", int(k_c[r, g]), "k", int(np.argmin(e[:, r, g])),
                           list(e[:, r, g])) for r, g in np.argwhere(~ok)[:3]]
    ties = int(np.sum((k_c != best_ref) & same))
    assert ties <= max(2, clip.size // 100), f"{ties} of {clip.size} choices differ from the reference (ties)"
    assert np.all(rel_close(clip, clip_ref, 1e-6) | (k_c != best_ref))


def test_awq_search_clip_equal_errors_take_the_first():
    # the input is 0 on the second group's columns: every candidate's error there is 0, so k = 0 (no
    # clipping, clip = m) must win
    w, x, _ = planted(26, 24, 256, 32)
    x[:, 128:] = 0.0
    st, clip, _ = c_search_clip(w, 128, x, "sym", 20, 0.5)
    assert st == lb.LB_OK
    assert np.array_equal(clip[:, 1], R.group_absmax(w, 128)[:, 1])
    assert np.any(clip[:, 0] < R.group_absmax(w, 128)[:, 0])  # and the live group does clip somewhere


def test_awq_search_clip_a_failing_quantizer_stops_it():
    w, x, _ = planted(25, 16, 128, 16)
    st, _, _ = c_search_clip(w, 128, x, "sym", 20, 0.5, fail_with=LB_ERR_NAN)
    assert st != lb.LB_OK

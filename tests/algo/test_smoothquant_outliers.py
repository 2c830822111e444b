"""SmoothQuant against independent numpy computations written from the
paper (Xiao et al. 2023, eq. 4: s_j = max|X_j|^a / max|W_j|^(1-a)):

* lb__smoothquant_scales on random maxima, dead channels, non-finite
  maxima and the clamp;
* the alpha search's objective (lb__smooth_group_error: the static range
  from the calibration's per-channel maxima) against a numpy W8A8
  fake-quantization of the same group (and per-token dynamic int8);
* a random q/k/v layer (fixed seed) whose inputs have a few channels 50x
  larger than the rest, W8A8 with int8 weights per channel and static
  per-tensor int8 activations: after lb__smoothquant_layer (alpha 0.5,
  and the search) the layer's output error on held-out inputs is well
  below round-to-nearest's (it would equal it with s = 1), the folded
  scales are the numpy ones, and the search picks the grid point numpy
  finds best on the calibration rows."""
import ctypes
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
import smooth_lib as sl  # noqa: E402

STORIES = sl.ml.ROOT / "models/stories260K.bin"
W_SPEC = "int8:channel:range=restricted"  # scale amax / 127, codes +-127 (the paper's symmetric int8)
A_SPEC = "int8:tensor"                    # static: scale = calibrated amax / 127
GRID = [k * 0.05 for k in range(1, 20)]
OUTLIERS = [5, 17, 40]


def np_scales(x, w, alpha):
    alpha = float(np.float32(alpha))  # the C alpha is a float
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    ok = (x > 0) & (w > 0) & np.isfinite(x) & np.isfinite(w)
    s = np.ones_like(x)
    with np.errstate(all="ignore"):
        s[ok] = x[ok] ** alpha / w[ok] ** (1 - alpha)
    return np.clip(s, 1e-5, 1e5)


def q_weight(w):
    """int8 per output channel, scale amax / 127, round to nearest even."""
    s = np.abs(w).max(axis=1, keepdims=True).astype(np.float32) / np.float32(127)
    s[s == 0] = 1
    return (np.clip(np.rint(w / s), -127, 127) * s).astype(np.float32)


def q_act_static(x, amax):
    s = np.float32(amax) / np.float32(127)
    return (np.clip(np.rint(x / s), -128, 127) * s).astype(np.float32)


def np_error(x, ws, s, amax_calib):
    """sum over the weights of ||X W^T - Qa(X/s) Qw(W s)^T||^2, static
    per-tensor activations with the range max_j amax_j / s_j (the
    calibration's maxima after smoothing: the search's objective,
    smooth_error.h)."""
    xq = q_act_static((x / s).astype(np.float32), (amax_calib / s).max()).astype(np.float64)
    x64 = x.astype(np.float64)
    return sum(float(((x64 @ w.T.astype(np.float64) - xq @ q_weight((w * s).astype(np.float32)).T) ** 2).sum())
               for w in ws)


def q_act_token_full(x):
    """int8 per token, lowbit's FULL grid (lowbit.h, lb_int_range): s =
    -min/128 unless 127 s < max, then max/127; codes -128..127."""
    lo = np.minimum(x.min(axis=1, keepdims=True), 0)
    hi = np.maximum(x.max(axis=1, keepdims=True), 0)
    s = (-lo / np.float32(128)).astype(np.float32)
    over = (np.float32(127) * s) < hi
    s = np.where(over, hi / np.float32(127), s).astype(np.float32)
    s[s == 0] = 1
    return (np.clip(np.rint(x / s), -128, 127) * s).astype(np.float32)


def np_error_dynamic(x, ws, s):
    xq = q_act_token_full((x / s).astype(np.float32)).astype(np.float64)
    x64 = x.astype(np.float64)
    return sum(float(((x64 @ w.T.astype(np.float64) - xq @ q_weight((w * s).astype(np.float32)).T) ** 2).sum())
               for w in ws)


def planted(rng, n, dim):
    x = rng.standard_normal((n, dim)).astype(np.float32)
    x[:, OUTLIERS] *= 50
    return x


def test_scales_match_numpy():
    rng = np.random.default_rng(1)
    n = 4096
    x = rng.lognormal(0, 3, n).astype(np.float32)
    w = rng.lognormal(-2, 2, n).astype(np.float32)
    x[:64] = 0
    w[64:128] = 0
    x[128] = np.inf
    w[129] = np.nan
    x[130], w[130] = 1e30, 1e-30  # clamped to 1e5
    x[131], w[131] = 1e-30, 1e30  # clamped to 1e-5
    for alpha in [0.0, 0.3, 0.5, 0.85, 1.0]:
        got = sl.smoothquant_scales(x, w, alpha)
        want = np_scales(x, w, alpha)
        np.testing.assert_allclose(got, want, rtol=2e-7, err_msg=f"alpha {alpha}")
        assert np.all(got[:128] == 1) and got[128] == 1 and got[129] == 1
    assert sl.smoothquant_scales(x[130:132], w[130:132], 0.5).tolist() == [np.float32(1e5), np.float32(1e-5)]


def make_group(x, absmax, ws, mode=sl.ACT_STATIC, act_spec=A_SPEC):
    g = sl.SmoothGroup(x=sl.fp(x), n=x.shape[0], cols=x.shape[1], x_absmax=sl.fp(absmax), n_members=len(ws),
                       scale_dtype=sl.DT_F32, threads=2)
    for k, w in enumerate(ws):
        g.m[k] = sl.SmoothMember(w=sl.fp(w), rows=w.shape[0], quantized=1, spec=sl.spec(W_SPEC),
                                act=sl.lb.QAct(mode=mode, spec=sl.spec(act_spec)))
    return g


@pytest.mark.parametrize("dynamic", [False, True])
def test_group_error_matches_numpy(dynamic):
    rng = np.random.default_rng(2)
    dim = 96
    x = planted(rng, 300, dim)
    absmax = np.abs(x).max(axis=0) * np.float32(1.25)  # the whole calibration saw more than the sample
    ws = [rng.standard_normal((r, dim)).astype(np.float32) for r in (48, 80)]
    g = make_group(x, absmax, ws, *((sl.ACT_DYNAMIC, "int8:token") if dynamic else ()))
    sl.check(sl.lib.lb__smooth_group_init(ctypes.byref(g)), "init")
    try:
        wmax = np.max([np.abs(w).max(axis=0) for w in ws], axis=0)
        for s in [np.ones(dim), np_scales(absmax, wmax, 0.5), np_scales(absmax, wmax, 0.8)]:
            s = s.astype(np.float32)
            err = ctypes.c_double()
            sl.check(sl.lib.lb__smooth_group_error(ctypes.byref(g), sl.fp(s), ctypes.byref(err)), "error")
            want = np_error_dynamic(x, ws, s) if dynamic else np_error(x, ws, s, absmax)
            # measured within 1e-6 (the fp32 products summed in another order)
            assert err.value == pytest.approx(want, rel=1e-5), (err.value, want)
    finally:
        sl.lib.lb__smooth_group_free(ctypes.byref(g))


def held_out_errors(search):
    """Smooths a random q/k/v layer in stories260K's layer 0 (weights
    replaced by Gaussian ones) calibrated on planted-outlier inputs; the
    output errors on held-out inputs: RTN's and SmoothQuant's, and the
    folded s."""
    rng = np.random.default_rng(15)
    with sl.QModel(STORIES) as q:
        q.set_dtype(sl.DT_F32)
        a = q.arch()
        dim = a.dim
        names = [f"model.layers.0.{n}.weight" for n in sl.LAYER_WEIGHTS[0]]
        idx = [q.index(n) for n in names]
        ws = [rng.standard_normal(q.shape(i)).astype(np.float32) for i in idx]
        for i, w in zip(idx, ws):
            q.replace(i, w)
            q.set_spec(i, W_SPEC)
            q.set_act(i, sl.ACT_STATIC, A_SPEC)
        calib = planted(rng, 1024, dim)
        held = planted(rng, 1024, dim)
        absmax = np.abs(calib).max(axis=0)
        other = [np.ones(n, np.float32) for n in (a.n_heads * a.head_dim, dim, a.hidden_dim)]
        samples = [calib] + [np.ones((1, o.size), np.float32) for o in other]
        st = sl.Stats(q, 0, a.n_kv_heads, a.head_dim, [absmax] + other, samples)
        norm = q.index("model.layers.0.input_layernorm.weight")
        before = q.source(norm)
        sl.check(sl.smooth_layer(q, st, alpha=0.5, search=search, sites=1 << sl.SITE_ATTN_IN), "smooth")
        s = (before.astype(np.float64) / q.source(norm)).astype(np.float32)
        new = [q.source(i) for i in idx]
    for w, wn in zip(ws, new):  # the weights' columns carry s
        np.testing.assert_allclose(wn, w * s, rtol=1e-6)
    ones = np.ones(dim, np.float32)
    rtn = np_error(held, ws, ones, absmax)
    sq = np_error(held, ws, s, absmax)
    wmax = np.max([np.abs(w).max(axis=0) for w in ws], axis=0)
    return rtn, sq, s, (calib, ws, absmax, wmax)


def test_planted_outliers_alpha_half():
    rtn, sq, s, (_, _, absmax, wmax) = held_out_errors(search=0)
    np.testing.assert_allclose(s, np_scales(absmax, wmax, 0.5), rtol=1e-6)
    print(f"planted outliers, W8A8 static: held-out error RTN {rtn:.4g}, SmoothQuant a=0.5 {sq:.4g} "
          f"({sq / rtn:.3f} of RTN)")
    assert sq < 0.25 * rtn  # measured 0.16; s = 1 gives 1


def test_planted_outliers_search():
    rtn, sq, s, (calib, ws, absmax, wmax) = held_out_errors(search=1)
    # the grid point the C search chose, and numpy's errors over the grid on the calibration rows
    errs = {alpha: np_error(calib, ws, np_scales(absmax, wmax, alpha).astype(np.float32), absmax)
            for alpha in GRID}
    errs[None] = np_error(calib, ws, np.ones_like(absmax), absmax)
    chosen = [alpha for alpha in GRID if np.allclose(s, np_scales(absmax, wmax, alpha), rtol=1e-6)]
    assert len(chosen) == 1, "the folded s is not a grid point's"
    best = min(errs.values())
    assert errs[chosen[0]] <= best * (1 + 1e-3), (chosen, sorted(errs.items(), key=lambda kv: kv[1])[:3])
    print(f"planted outliers, W8A8 static: search chose alpha {chosen[0]:.2f}; held-out error RTN {rtn:.4g}, "
          f"SmoothQuant {sq:.4g} ({sq / rtn:.3f} of RTN)")
    assert sq < 0.5 * rtn  # measured 0.22; s = 1 gives 1

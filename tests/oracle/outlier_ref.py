"""numpy references for the outlier methods, written from the papers (and,
where a paper leaves a detail open, from the authors' public code, read
for its rules only): the independent side that tests/oracle/
test_outlier_oracle.py holds lowbit's C searches (src/algo/awq.h,
smoothquant.h) against.

SmoothQuant -- Xiao, Lin, Seznec, Wu, Demouth, Han, "SmoothQuant: Accurate
and Efficient Post-Training Quantization for Large Language Models", ICML
2023, section 4 eq. (4):
    s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)
  smoothquant_scales: that formula per input channel j; max|W_j| is over
  every weight that reads the input (mit-han-lab/smoothquant, smooth.py,
  smooth_ln_fcs: the maximum over q, k and v together). Where the papers'
  code clamps (weight max >= 1e-5, s >= 1e-5) lowbit's header documents its
  own edge rule, which this reference follows: a channel whose activation
  or weight maximum is 0 or not finite gets s_j = 1, and s is clamped to
  [1e-5, 1e5].

AWQ -- Lin, Tang, Tang, Yang, Chen, Wang, Xiao, Dang, Gan, Han, "AWQ:
Activation-aware Weight Quantization for On-Device LLM Compression and
Acceleration", MLSys 2024, section 3.2 eqs. (4)-(5):
    s = s_X^alpha,  alpha* = argmin_alpha || Q(W diag(s)) (diag(s)^-1 X) - W X ||
  with s_X the mean magnitude of each input channel and alpha on a grid
  over [0, 1). The paper leaves open the grid, the normalisation of s and
  the clipping search; those follow mit-han-lab/llm-awq (auto_scale.py,
  auto_clip.py) and casper-hansen/AutoAWQ (quantizer.py: _compute_best_scale
  without duo_scaling, _compute_best_clip):
  awq_scale_candidates / awq_search_scale: alpha = k / grid, k = 0..grid-1
    (the paper and both codes: grid 20); s = max(x_mean^alpha, 1e-4), then
    s / sqrt(max s * min s); the error of grid point k is the mean squared
    output error of the group's linears, each fake-quantized by its own
    quantizer after scaling,
        err = sum over sample rows x and weight rows w of
              (x . (Q(w diag(s)) diag(1/s) - w))^2 / (n * rows)
    (the codes measure the error after the whole attention or MLP block
    when one is given; lowbit's contract measures the linears' outputs,
    which is what is implemented here); the first of equal minima wins
    (the codes: `loss < best`).
  awq_search_clip: per output row and quantization group, m = max |w|; the
    candidates m (1 - k / grid) for k < int(grid * max_shrink) (the codes:
    grid 20, max_shrink 0.5, so 10); the weight clamped to [-c, c] group by
    group and fake-quantized; the error of a (row, group) is the mean over
    the sample rows of the group's partial product error
    (x_g . (Q(w)_g - w_g))^2, w unclamped; the first of equal minima.
  Everything is accumulated in float64 (the weights and what the quantizer
  returns are float32, as in lowbit).

Quantizers (fake quantization: quantize, then dequantize; float32 in, out;
groups of consecutive columns per row, the last one partial when cols is
not a multiple):
  fq_int4_sym    AutoAWQ's pseudo_quantize_tensor, zero_point=False:
                 d = max(absmax, 1e-5) / 7, q = clip(rne(w / d), -8, 7) d.
  fq_int4_asym   AutoAWQ's zero_point=True: d = max(max - min, 1e-5) / 15,
                 z = clip(-rne(min / d), 0, 15),
                 q = (clip(rne(w / d) + z, 0, 15) - z) d.
  fq_lowbit_int4 lowbit's own "int4:gN" (range=signed, the default: lowbit.h
                 lb_int_range and tests/oracle/test_quant_signed.py):
                 lo = min(0, min w), hi = max(0, max w), m = lo if -lo >= hi
                 else hi, d = fl(m / -8), q = rne(clip(w / d, -8, 7)) d; an
                 all-zero group is 0. Bit-exact with lb_quantize +
                 lb_dequantize (checked by the tests)."""
import numpy as np

F32 = np.float32
F64 = np.float64


# ---------------------------------------------------------------- quantizers

def _groups(cols, group):
    return [(a, min(a + group, cols)) for a in range(0, cols, group)]


def fq_int4_sym(w, group=128):
    w = np.asarray(w, F32)
    out = np.empty_like(w)
    for a, b in _groups(w.shape[1], group):
        blk = w[:, a:b]
        d = np.maximum(np.abs(blk).max(axis=1, keepdims=True), F32(1e-5)) / F32(7)
        out[:, a:b] = np.clip(np.rint(blk / d), -8, 7).astype(F32) * d
    return out


def fq_int4_asym(w, group=128):
    w = np.asarray(w, F32)
    out = np.empty_like(w)
    for a, b in _groups(w.shape[1], group):
        blk = w[:, a:b]
        mx, mn = blk.max(axis=1, keepdims=True), blk.min(axis=1, keepdims=True)
        d = np.maximum(mx - mn, F32(1e-5)) / F32(15)
        z = np.clip(-np.rint(mn / d), 0, 15).astype(F32)
        out[:, a:b] = (np.clip(np.rint(blk / d) + z, 0, 15) - z).astype(F32) * d
    return out


def fq_lowbit_int4(w, group=128):
    w = np.asarray(w, F32)
    out = np.zeros_like(w)
    for a, b in _groups(w.shape[1], group):
        blk = w[:, a:b]
        lo = np.minimum(F32(0), blk.min(axis=1, keepdims=True))
        hi = np.maximum(F32(0), blk.max(axis=1, keepdims=True))
        m = np.where(-lo >= hi, lo, hi)
        d = (m / F32(-8)).astype(F32)
        live = (d != 0)[:, 0]
        dl = d[live]
        codes = np.rint(np.clip(blk[live] / dl, -8, 7))
        out[live, a:b] = codes.astype(F32) * dl
    return out


# ---------------------------------------------------------------- SmoothQuant

def smoothquant_scales(x_absmax, w_absmax, alpha):
    """s (float64) per channel: max|X_j|^alpha / max|W_j|^(1 - alpha),
    1 where either maximum is 0 or not finite, clamped to [1e-5, 1e5]."""
    x = np.asarray(x_absmax, F64)
    w = np.asarray(w_absmax, F64)
    ok = np.isfinite(x) & np.isfinite(w) & (x > 0) & (w > 0)
    s = np.ones_like(x)
    with np.errstate(all="ignore"):
        s[ok] = x[ok] ** alpha / w[ok] ** (1.0 - alpha)
    return np.clip(s, 1e-5, 1e5)


# ---------------------------------------------------------------- AWQ: scales

def awq_scale_candidates(x_mean, grid):
    """[grid][cols] float64: s for alpha = k / grid."""
    xm = np.asarray(x_mean, F64)
    out = np.empty((grid, xm.size))
    for k in range(grid):
        s = np.maximum(xm ** (k / grid), 1e-4)  # 0 ** 0 = 1
        out[k] = s / np.sqrt(s.max() * s.min())
    return out


def output_error(x, wq, w):
    """sum over rows of x and of w of (x . (wq - w))^2 / (n rows), float64."""
    e = np.asarray(x, F64) @ (np.asarray(wq, F64) - np.asarray(w, F64)).T
    return float(np.mean(e * e))


def scaled_weight(w, s):
    """What a float32 implementation hands its quantizer: fl(w s)."""
    return (np.asarray(w, F32) * np.asarray(s, F64).astype(F32)).astype(F32)


def awq_grid_error(w, member_rows, quantizers, x, s):
    """err of one grid point: every member scaled, fake-quantized by its
    own quantizer, unscaled; the output error over all rows together."""
    w = np.asarray(w, F32)
    d_all = []
    r = 0
    for rows, fq in zip(member_rows, quantizers):
        wm = w[r:r + rows]
        q = fq(scaled_weight(wm, s)).astype(F64) / s
        d_all.append(q)
        r += rows
    return output_error(x, np.concatenate(d_all), w)


def awq_search_scale(w, member_rows, quantizers, x, x_mean, grid=20):
    """(best s as float32, err per grid point (float64), best k)."""
    cand = awq_scale_candidates(x_mean, grid)
    err = np.array([awq_grid_error(w, member_rows, quantizers, x, cand[k]) for k in range(grid)])
    best = int(np.argmin(err))  # argmin: the first of equal minima
    return cand[best].astype(F32), err, best


# ---------------------------------------------------------------- AWQ: clipping

def group_absmax(w, group):
    """[rows][groups] max |w| per row and group (float32)."""
    w = np.asarray(w, F32)
    return np.stack([np.abs(w[:, a:b]).max(axis=1) for a, b in _groups(w.shape[1], group)], axis=1)


def clip_candidates(m, grid, max_shrink):
    """[K][rows][groups] float32: m (1 - k / grid), k < int(grid * max_shrink)."""
    n = int(grid * max_shrink)
    return np.stack([(m.astype(F64) * (1.0 - k / grid)).astype(F32) for k in range(n)])


def clamp_groups(w, c, group):
    """w with every (row, group) clamped to [-c, c]."""
    w = np.asarray(w, F32)
    out = np.empty_like(w)
    for g, (a, b) in enumerate(_groups(w.shape[1], group)):
        cg = c[:, g:g + 1]
        out[:, a:b] = np.clip(w[:, a:b], -cg, cg)
    return out


def group_errors(w, wq, x, group):
    """[rows][groups]: mean over rows of x of (x_g . (wq_g - w_g))^2, float64."""
    x = np.asarray(x, F64)
    d = np.asarray(wq, F64) - np.asarray(w, F64)
    out = []
    for a, b in _groups(d.shape[1], group):
        e = x[:, a:b] @ d[:, a:b].T  # n x rows
        out.append(np.mean(e * e, axis=0))
    return np.stack(out, axis=1)


def awq_search_clip(w, group, x, fq, grid=20, max_shrink=0.5):
    """(clip [rows][groups] float32, err [K][rows][groups] float64, best k [rows][groups])."""
    cand = clip_candidates(group_absmax(w, group), grid, max_shrink)
    err = np.stack([group_errors(w, fq(clamp_groups(w, c, group)), x, group) for c in cand])
    best = np.argmin(err, axis=0)  # the first of equal minima
    clip = np.take_along_axis(cand, best[None], axis=0)[0]
    return clip, err, best

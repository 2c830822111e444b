/* AVX2 twin of the eight-group searches (ggml_quant_search.h): one group a
 * lane, each lane doing the scalar function's operations in its order, so
 * the results are the same bits. What makes that hold:
 *   - ggml's `if (x < m) m = x` is vminps(x, m) and `if (x > m) m = x` is
 *     vmaxps(x, m) (both return the second operand unless the compare
 *     holds, which also keeps the scalar code's choice between -0 and +0);
 *   - the scalar `if (v > 0) v = 0` is a blend (vminps would turn -0 into
 *     +0);
 *   - nearest_int's add-the-magic-number trick is the same three integer
 *     and float operations; clamps are vpmaxsd/vpminsd;
 *   - every sum runs over the elements in order, no FMA (vmulps then
 *     vaddps; the file is compiled with -mfma but -ffp-contract=off and
 *     no fused intrinsic is used);
 *   - the scalar code's early returns and updates become per-lane masks,
 *     a lane's garbage (a flat group's infinite scale) never reaching a
 *     kept result. */
#include "io/ggml_quant_search.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>
#include <math.h>

static inline __m256i nearest8(__m256 v)
{
    __m256 t = _mm256_add_ps(v, _mm256_set1_ps(12582912.f));
    __m256i bits = _mm256_and_si256(_mm256_castps_si256(t), _mm256_set1_epi32(0x007FFFFF));
    return _mm256_sub_epi32(bits, _mm256_set1_epi32(0x00400000));
}

static inline __m256i clamp8(__m256i v, int lo, int hi)
{
    return _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(lo)), _mm256_set1_epi32(hi));
}

static inline __m256 abs8(__m256 v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }

static inline __m256 neg8(__m256 v) { return _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))); }

/* ((scale * l) + min - x), then |.| or squared */
static inline __m256 err8(__m256 scale, __m256 lf, __m256 min, __m256 x, int use_mad)
{
    __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, lf), min), x);
    return use_mad ? abs8(diff) : _mm256_mul_ps(diff, diff);
}

static void store_codes_u8(const __m256i *l, int n, uint8_t *L)
{
    for (int i = 0; i < n; ++i) {
        int32_t t[8];
        _mm256_storeu_si256((__m256i *)t, l[i]);
        for (int g = 0; g < 8; ++g) L[8 * i + g] = (uint8_t)t[g];
    }
}

static void qkx8_avx2(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *scale_out,
                      float *the_min, float rmin, float rdelta, int nstep, int use_mad, int flat_le)
{
    const __m256 zero = _mm256_setzero_ps();
    const __m256 magic = _mm256_set1_ps(12582912.f), fmax_code = _mm256_set1_ps((float)nmax);
    __m256 xs[32], ws[32], xm[32], best_l[32], aux[32];
    for (int i = 0; i < n; ++i) {
        xs[i] = _mm256_loadu_ps(x + 8 * i);
        ws[i] = _mm256_loadu_ps(weights + 8 * i);
    }
    __m256 min = _mm256_loadu_ps(x), max = min, sum_w = _mm256_loadu_ps(weights);
    __m256 sum_x = _mm256_mul_ps(sum_w, min);
    for (int i = 1; i < n; ++i) {
        min = _mm256_min_ps(xs[i], min);
        max = _mm256_max_ps(xs[i], max);
        sum_w = _mm256_add_ps(sum_w, ws[i]);
        sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(ws[i], xs[i]));
    }
    const __m256 true_min = min;
    min = _mm256_blendv_ps(min, zero, _mm256_cmp_ps(min, zero, _CMP_GT_OQ));
    /* (two calls: the predicate must be a compile-time immediate at any -O) */
    const __m256 flat = flat_le ? _mm256_cmp_ps(max, min, _CMP_LE_OQ) : _mm256_cmp_ps(max, min, _CMP_EQ_OQ);
    const __m256 flat_min = min;

    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)nmax), _mm256_sub_ps(max, min));
    __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.f), iscale);
    __m256 best = zero;
    for (int i = 0; i < n; ++i) {
        xm[i] = _mm256_sub_ps(xs[i], min);
        best_l[i] = _mm256_cvtepi32_ps(clamp8(nearest8(_mm256_mul_ps(iscale, xm[i])), 0, nmax));
        __m256 diff = err8(scale, best_l[i], min, xs[i], use_mad);
        best = _mm256_add_ps(best, _mm256_mul_ps(ws[i], diff));
    }
    for (int is = 0; nstep >= 1 && is <= nstep; ++is) {
        const float num = rmin + rdelta * (float)is + (float)nmax;
        const __m256 range = _mm256_sub_ps(max, min);
        iscale = _mm256_div_ps(_mm256_set1_ps(num), range);
        /* The codes take the float route, (v + 1.5 * 2^23) - 1.5 * 2^23
         * clamped in float, which is nearest_int's integer trick exactly
         * while |v| < 2^22. v = iscale * (x - min) is bounded by
         * |iscale| * max(|max - min|, |true min - min|) (rounding is
         * monotonic); a lane (not flat) past that bound sends the whole
         * trial down the integer route, whose garbage is ggml's. */
        const __m256 reach = _mm256_max_ps(abs8(range), abs8(_mm256_sub_ps(true_min, min)));
        const __m256 far = _mm256_cmp_ps(_mm256_mul_ps(abs8(iscale), reach), _mm256_set1_ps(4194304.f), _CMP_NLT_UQ);
        const int exact = !_mm256_movemask_ps(_mm256_andnot_ps(flat, far));
        __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
        for (int i = 0; i < n; ++i) {
            __m256 v = _mm256_mul_ps(iscale, xm[i]);
            __m256 lf = exact ? _mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_add_ps(v, magic), magic), zero), fmax_code)
                              : _mm256_cvtepi32_ps(clamp8(nearest8(v), 0, nmax));
            aux[i] = lf;
            __m256 wl = _mm256_mul_ps(ws[i], lf);
            sum_l = _mm256_add_ps(sum_l, wl);
            sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, lf));
            sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, xs[i]));
        }
        __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
        __m256 dpos = _mm256_cmp_ps(D, zero, _CMP_GT_OQ);
        if (!_mm256_movemask_ps(dpos)) continue;
        __m256 this_scale = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
        __m256 this_min = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
        __m256 mpos = _mm256_cmp_ps(this_min, zero, _CMP_GT_OQ);
        this_min = _mm256_blendv_ps(this_min, zero, mpos);
        this_scale = _mm256_blendv_ps(this_scale, _mm256_div_ps(sum_xl, sum_l2), mpos);
        __m256 cur = zero;
        for (int i = 0; i < n; ++i) {
            __m256 diff = err8(this_scale, aux[i], this_min, xs[i], use_mad);
            cur = _mm256_add_ps(cur, _mm256_mul_ps(ws[i], diff));
        }
        __m256 upd = _mm256_and_ps(dpos, _mm256_cmp_ps(cur, best, _CMP_LT_OQ));
        if (!_mm256_movemask_ps(upd)) continue;
        best = _mm256_blendv_ps(best, cur, upd);
        scale = _mm256_blendv_ps(scale, this_scale, upd);
        min = _mm256_blendv_ps(min, this_min, upd);
        for (int i = 0; i < n; ++i) {
            best_l[i] = _mm256_blendv_ps(best_l[i], aux[i], upd);
            xm[i] = _mm256_sub_ps(xs[i], min);
        }
    }
    /* flat groups: codes 0, scale 0, the min as found */
    __m256i flati = _mm256_castps_si256(flat), codes[32];
    for (int i = 0; i < n; ++i) codes[i] = _mm256_andnot_si256(flati, _mm256_cvtps_epi32(best_l[i]));
    _mm256_storeu_ps(scale_out, _mm256_blendv_ps(scale, zero, flat));
    _mm256_storeu_ps(the_min, neg8(_mm256_blendv_ps(min, flat_min, flat)));
    store_codes_u8(codes, n, L);
}

/* make_qx_quants' codes need no integer trip: v = iscale * x with
 * |x| <= |max| and |iscale| <= (nmax + 0.9) / |max| stays far below 2^22,
 * where nearest_int(v) is exactly the float (v + 1.5 * 2^23) - 1.5 * 2^23
 * (round to nearest even), and clamping that float is clamping the int.
 * (A group below GROUP_EPS may overflow; its lanes are discarded.) */
static inline __m256 qx_code(__m256 iscale, __m256 x, __m256 lo, __m256 hi)
{
    const __m256 magic = _mm256_set1_ps(12582912.f);
    __m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(iscale, x), magic), magic);
    return _mm256_min_ps(_mm256_max_ps(r, lo), hi);
}

static void qx8_avx2(int n, int nmax, const float *x, const float *qw, int8_t *L, float *scale_out)
{
    const __m256 zero = _mm256_setzero_ps();
    const __m256 lo = _mm256_set1_ps((float)-nmax), hi = _mm256_set1_ps((float)(nmax - 1));
    __m256 xs[32], ws[32], wx[32];
    __m256 max = zero, amax = zero;
    for (int i = 0; i < n; ++i) {
        xs[i] = _mm256_loadu_ps(x + 8 * i);
        ws[i] = qw ? _mm256_loadu_ps(qw + 8 * i) : _mm256_mul_ps(xs[i], xs[i]);
        wx[i] = _mm256_mul_ps(ws[i], xs[i]); /* ggml's w * x[i] * l is (w * x[i]) * l */
        __m256 ax = abs8(xs[i]);
        __m256 gt = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
        amax = _mm256_blendv_ps(amax, ax, gt);
        max = _mm256_blendv_ps(max, xs[i], gt);
    }
    const __m256 small = _mm256_cmp_ps(amax, _mm256_set1_ps(LB__GGML_GROUP_EPS), _CMP_LT_OQ);
    /* The 19 trials' sums do not depend on each other (only the choice
     * among them is sequential), so they are computed two at a time (two
     * independent add chains), the choice made after, and the codes
     * recomputed from the chosen inverse scale, as ggml does on each
     * improvement. Trial 0 is ggml's first, -nmax / max. */
    __m256 iscales[19], sumlx[19], suml2[19];
    for (int t = 0; t < 19; ++t) {
        const int is = t == 0 ? 0 : t <= 9 ? t - 10 : t - 9; /* 0, then -9 .. -1, 1 .. 9 */
        iscales[t] = t == 0 ? _mm256_div_ps(_mm256_set1_ps((float)-nmax), max)
                            : _mm256_div_ps(_mm256_set1_ps(-((float)nmax + 0.1f * (float)is)), max);
    }
    for (int t = 0; t < 19; t += 2) {
        const int pair = t + 1 < 19;
        __m256 sa = zero, qa = zero, sb = zero, qb = zero;
        for (int i = 0; i < n; ++i) {
            __m256 la = qx_code(iscales[t], xs[i], lo, hi);
            sa = _mm256_add_ps(sa, _mm256_mul_ps(wx[i], la));
            qa = _mm256_add_ps(qa, _mm256_mul_ps(_mm256_mul_ps(ws[i], la), la));
            if (pair) {
                __m256 lb = qx_code(iscales[t + 1], xs[i], lo, hi);
                sb = _mm256_add_ps(sb, _mm256_mul_ps(wx[i], lb));
                qb = _mm256_add_ps(qb, _mm256_mul_ps(_mm256_mul_ps(ws[i], lb), lb));
            }
        }
        sumlx[t] = sa;
        suml2[t] = qa;
        if (pair) {
            sumlx[t + 1] = sb;
            suml2[t + 1] = qb;
        }
    }
    /* suml2 ? sumlx / suml2 : 0 (NaN counts as true, as in C) */
    __m256 scale = _mm256_blendv_ps(zero, _mm256_div_ps(sumlx[0], suml2[0]), _mm256_cmp_ps(suml2[0], zero, _CMP_NEQ_UQ));
    __m256 best = _mm256_mul_ps(scale, sumlx[0]);
    __m256 chosen = iscales[0];
    for (int t = 1; t < 19; ++t) {
        __m256 upd = _mm256_and_ps(_mm256_cmp_ps(suml2[t], zero, _CMP_GT_OQ),
                                   _mm256_cmp_ps(_mm256_mul_ps(sumlx[t], sumlx[t]), _mm256_mul_ps(best, suml2[t]), _CMP_GT_OQ));
        __m256 s = _mm256_div_ps(sumlx[t], suml2[t]);
        scale = _mm256_blendv_ps(scale, s, upd);
        best = _mm256_blendv_ps(best, _mm256_mul_ps(s, sumlx[t]), upd);
        chosen = _mm256_blendv_ps(chosen, iscales[t], upd);
    }
    const __m256i vn = _mm256_set1_epi32(nmax), smalli = _mm256_castps_si256(small);
    __m256i codes[32];
    for (int i = 0; i < n; ++i)
        codes[i] = _mm256_andnot_si256(smalli, _mm256_add_epi32(_mm256_cvtps_epi32(qx_code(chosen, xs[i], lo, hi)), vn));
    _mm256_storeu_ps(scale_out, _mm256_blendv_ps(scale, zero, small));
    store_codes_u8(codes, n, (uint8_t *)L);
}

static float qx1_avx2(int n, int nmax, const float *x, int8_t *L, const float *qw)
{
    float max = 0, amax = 0;
    int finite = 1;
    for (int i = 0; i < n; ++i) {
        float ax = x[i] < 0 ? -x[i] : x[i];
        finite &= isfinite(x[i]) != 0;
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    /* This search also runs on derived values (Q3_K's sixteen sub-block
     * scales), which overflow to infinity (or NaN) for rows with huge
     * outliers; there a product iscale * x is not a number, which ggml's
     * nearest_int turns into 0 and qx_code's float rounding and clamp into
     * -nmax: the scalar function keeps its bits. */
    if (!finite) return lb__ggml_make_qx_quants(n, nmax, x, L, qw);
    if (amax < LB__GGML_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    /* lane t holds trial t: ggml's first inverse scale, then is = -9 .. 9
     * without 0; lanes 19 .. 23 repeat trial 0 and are never chosen */
    float isc[24], sl[24], sq[24];
    for (int t = 0; t < 24; ++t) {
        const int is = t > 0 && t < 19 ? (t <= 9 ? t - 10 : t - 9) : 0;
        isc[t] = is == 0 ? (float)-nmax / max : -((float)nmax + 0.1f * (float)is) / max;
    }
    const __m256 zero = _mm256_setzero_ps();
    const __m256 lo = _mm256_set1_ps((float)-nmax), hi = _mm256_set1_ps((float)(nmax - 1));
    __m256 is8[3], s[3] = {zero, zero, zero}, q[3] = {zero, zero, zero};
    for (int b = 0; b < 3; ++b) is8[b] = _mm256_loadu_ps(isc + 8 * b);
    for (int i = 0; i < n; ++i) {
        const float w = qw ? qw[i] : x[i] * x[i];
        const __m256 xv = _mm256_set1_ps(x[i]), wv = _mm256_set1_ps(w), wxv = _mm256_set1_ps(w * x[i]);
        for (int b = 0; b < 3; ++b) {
            __m256 l = qx_code(is8[b], xv, lo, hi);
            s[b] = _mm256_add_ps(s[b], _mm256_mul_ps(wxv, l));
            q[b] = _mm256_add_ps(q[b], _mm256_mul_ps(_mm256_mul_ps(wv, l), l));
        }
    }
    for (int b = 0; b < 3; ++b) {
        _mm256_storeu_ps(sl + 8 * b, s[b]);
        _mm256_storeu_ps(sq + 8 * b, q[b]);
    }
    float scale = sq[0] != 0 ? sl[0] / sq[0] : 0.0f;
    float best = scale * sl[0];
    int chosen = 0;
    for (int t = 1; t < 19; ++t)
        if (sq[t] > 0 && sl[t] * sl[t] > best * sq[t]) {
            scale = sl[t] / sq[t];
            best = scale * sl[t];
            chosen = t;
        }
    for (int i = 0; i < n; ++i) {
        int l = lb__nearest_int(isc[chosen] * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (int8_t)(nmax + l);
    }
    return scale;
}

static void q3_8_avx2(int n, int nmax, const float *x, int8_t *L, float *scale_out)
{
    const __m256 zero = _mm256_setzero_ps();
    __m256 xs[32], ws[32], wx[32];
    __m256i ls[32];
    __m256 max = zero, amax = zero;
    for (int i = 0; i < n; ++i) {
        xs[i] = _mm256_loadu_ps(x + 8 * i);
        ws[i] = _mm256_mul_ps(xs[i], xs[i]);
        wx[i] = _mm256_mul_ps(ws[i], xs[i]);
        __m256 ax = abs8(xs[i]);
        __m256 gt = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
        amax = _mm256_blendv_ps(amax, ax, gt);
        max = _mm256_blendv_ps(max, xs[i], gt);
    }
    const __m256 small = _mm256_cmp_ps(amax, _mm256_set1_ps(LB__GGML_GROUP_EPS), _CMP_LT_OQ);
    const __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)-nmax), max);
    __m256 sumlx = zero, suml2 = zero;
    for (int i = 0; i < n; ++i) {
        ls[i] = clamp8(nearest8(_mm256_mul_ps(iscale, xs[i])), -nmax, nmax - 1);
        __m256 lf = _mm256_cvtepi32_ps(ls[i]);
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(wx[i], lf));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(ws[i], lf), lf));
    }
    /* A lane whose pass changed nothing would change nothing in the next
     * (same state, same arithmetic), so running every lane until none
     * changes, at most 5 passes, is each lane's own loop. */
    for (int itry = 0; itry < 5; ++itry) {
        __m256 changed = zero;
        for (int i = 0; i < n; ++i) {
            __m256 lf = _mm256_cvtepi32_ps(ls[i]);
            __m256 slx = _mm256_sub_ps(sumlx, _mm256_mul_ps(wx[i], lf));
            __m256 m1 = _mm256_cmp_ps(slx, zero, _CMP_GT_OQ);
            if (!_mm256_movemask_ps(m1)) continue;
            __m256 sl2 = _mm256_sub_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(ws[i], lf), lf));
            __m256i nl = clamp8(nearest8(_mm256_div_ps(_mm256_mul_ps(xs[i], sl2), slx)), -nmax, nmax - 1);
            __m256 m2 = _mm256_castsi256_ps(_mm256_xor_si256(_mm256_cmpeq_epi32(nl, ls[i]), _mm256_set1_epi32(-1)));
            /* usually no lane's code moves: then the sums stay and the
             * (predicted) branch lets the next element start at once
             * instead of waiting on this one's division through a blend */
            if (!_mm256_movemask_ps(_mm256_and_ps(m1, m2))) continue;
            __m256 nlf = _mm256_cvtepi32_ps(nl);
            slx = _mm256_add_ps(slx, _mm256_mul_ps(wx[i], nlf));
            sl2 = _mm256_add_ps(sl2, _mm256_mul_ps(_mm256_mul_ps(ws[i], nlf), nlf));
            __m256 m3 = _mm256_and_ps(_mm256_cmp_ps(sl2, zero, _CMP_GT_OQ),
                                      _mm256_cmp_ps(_mm256_mul_ps(_mm256_mul_ps(slx, slx), suml2),
                                                    _mm256_mul_ps(_mm256_mul_ps(sumlx, sumlx), sl2), _CMP_GT_OQ));
            __m256 upd = _mm256_and_ps(_mm256_and_ps(m1, m2), m3);
            ls[i] = _mm256_blendv_epi8(ls[i], nl, _mm256_castps_si256(upd));
            sumlx = _mm256_blendv_ps(sumlx, slx, upd);
            suml2 = _mm256_blendv_ps(suml2, sl2, upd);
            changed = _mm256_or_ps(changed, upd);
        }
        if (!_mm256_movemask_ps(changed)) break;
    }
    const __m256i vn = _mm256_set1_epi32(nmax), smalli = _mm256_castps_si256(small);
    for (int i = 0; i < n; ++i) ls[i] = _mm256_andnot_si256(smalli, _mm256_add_epi32(ls[i], vn));
    __m256 scale = _mm256_blendv_ps(zero, _mm256_div_ps(sumlx, suml2), _mm256_cmp_ps(suml2, zero, _CMP_GT_OQ));
    _mm256_storeu_ps(scale_out, _mm256_blendv_ps(scale, zero, small));
    store_codes_u8(ls, n, (uint8_t *)L);
}

static void requant_avx2(const float *x, int n, float d, float m, int add_m, int lo, int hi, int offset, uint8_t *L)
{
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    const __m256i voff = _mm256_set1_epi32(offset);
    for (int i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (add_m) v = _mm256_add_ps(v, vm);
        __m256i q = _mm256_add_epi32(clamp8(nearest8(_mm256_div_ps(v, vd)), lo, hi), voff);
        /* codes fit a byte: pack 8 int32 to 8 bytes without saturating */
        __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64((__m128i *)(L + i), _mm_packus_epi16(q16, q16));
    }
}

static void imatrix_weights_avx2(const float *qw, const float *x, float sigma2, int n, float *w)
{
    const __m256 s2 = _mm256_set1_ps(sigma2);
    for (int i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 r = _mm256_sqrt_ps(_mm256_add_ps(s2, _mm256_mul_ps(v, v)));
        _mm256_storeu_ps(w + i, _mm256_mul_ps(_mm256_loadu_ps(qw + i), r));
    }
}

const lb__ggml_search8 lb__ggml_search8_avx2 = {qkx8_avx2,    qx8_avx2,           qx1_avx2, q3_8_avx2,
                                                requant_avx2, imatrix_weights_avx2};
#else
const lb__ggml_search8 lb__ggml_search8_avx2 = {0};
#endif

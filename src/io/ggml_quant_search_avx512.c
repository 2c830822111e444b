/* AVX-512 twin of the asymmetric and symmetric searches for sixteen groups
 * at once (ggml_quant_search.h, lb__ggml_search16): the AVX2 eight-group
 * kernels (ggml_quant_search_avx2.c, whose header comment says why a lane
 * gives the scalar function's bits) with sixteen lanes. The operations are
 * theirs one for one: vminps/vmaxps keep the second operand as before,
 * blends take mask registers instead of sign bits, and a group's branch
 * (`if` on any lane) tests a mask instead of a movemask. Sixteen lanes
 * halve the instructions of a K-quant's scale search, which is most of a
 * Q4_K or Q6_K row's time. */
#include "io/ggml_quant_search.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
#include <immintrin.h>

static inline __m512i nearest16(__m512 v)
{
    __m512 t = _mm512_add_ps(v, _mm512_set1_ps(12582912.f));
    __m512i bits = _mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32(0x007FFFFF));
    return _mm512_sub_epi32(bits, _mm512_set1_epi32(0x00400000));
}

static inline __m512i clamp16(__m512i v, int lo, int hi)
{
    return _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(lo)), _mm512_set1_epi32(hi));
}

static inline __m512 abs16(__m512 v) { return _mm512_and_ps(v, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF))); }

static inline __m512 neg16(__m512 v) { return _mm512_xor_ps(v, _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u))); }

/* ((scale * l) + min - x), then |.| or squared */
static inline __m512 err16(__m512 scale, __m512 lf, __m512 min, __m512 x, int use_mad)
{
    __m512 diff = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(scale, lf), min), x);
    return use_mad ? abs16(diff) : _mm512_mul_ps(diff, diff);
}

/* the codes fit a byte: vpmovdb's truncation is the scalar (uint8_t) cast */
static void store_codes_u8(const __m512i *l, int n, uint8_t *L)
{
    for (int i = 0; i < n; ++i) _mm_storeu_si128((__m128i *)(L + 16 * i), _mm512_cvtepi32_epi8(l[i]));
}

static void qkx16_avx512(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *scale_out,
                         float *the_min, float rmin, float rdelta, int nstep, int use_mad, int flat_le)
{
    const __m512 zero = _mm512_setzero_ps();
    const __m512 magic = _mm512_set1_ps(12582912.f), fmax_code = _mm512_set1_ps((float)nmax);
    __m512 xs[32], ws[32], xm[32], best_l[32], aux[32];
    for (int i = 0; i < n; ++i) {
        xs[i] = _mm512_loadu_ps(x + 16 * i);
        ws[i] = _mm512_loadu_ps(weights + 16 * i);
    }
    __m512 min = _mm512_loadu_ps(x), max = min, sum_w = _mm512_loadu_ps(weights);
    __m512 sum_x = _mm512_mul_ps(sum_w, min);
    for (int i = 1; i < n; ++i) {
        min = _mm512_min_ps(xs[i], min);
        max = _mm512_max_ps(xs[i], max);
        sum_w = _mm512_add_ps(sum_w, ws[i]);
        sum_x = _mm512_add_ps(sum_x, _mm512_mul_ps(ws[i], xs[i]));
    }
    const __m512 true_min = min;
    min = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(min, zero, _CMP_GT_OQ), min, zero);
    /* (two calls: the predicate must be a compile-time immediate at any -O) */
    const __mmask16 flat = flat_le ? _mm512_cmp_ps_mask(max, min, _CMP_LE_OQ) : _mm512_cmp_ps_mask(max, min, _CMP_EQ_OQ);
    const __m512 flat_min = min;

    __m512 iscale = _mm512_div_ps(_mm512_set1_ps((float)nmax), _mm512_sub_ps(max, min));
    __m512 scale = _mm512_div_ps(_mm512_set1_ps(1.f), iscale);
    __m512 best = zero;
    for (int i = 0; i < n; ++i) {
        xm[i] = _mm512_sub_ps(xs[i], min);
        best_l[i] = _mm512_cvtepi32_ps(clamp16(nearest16(_mm512_mul_ps(iscale, xm[i])), 0, nmax));
        __m512 diff = err16(scale, best_l[i], min, xs[i], use_mad);
        best = _mm512_add_ps(best, _mm512_mul_ps(ws[i], diff));
    }
    for (int is = 0; nstep >= 1 && is <= nstep; ++is) {
        const float num = rmin + rdelta * (float)is + (float)nmax;
        const __m512 range = _mm512_sub_ps(max, min);
        iscale = _mm512_div_ps(_mm512_set1_ps(num), range);
        /* the float route for the codes while every lane that is not flat
         * stays below 2^22 (the AVX2 twin's comment says why it is exact) */
        const __m512 reach = _mm512_max_ps(abs16(range), abs16(_mm512_sub_ps(true_min, min)));
        const __mmask16 far =
            _mm512_cmp_ps_mask(_mm512_mul_ps(abs16(iscale), reach), _mm512_set1_ps(4194304.f), _CMP_NLT_UQ);
        const int exact = !(far & (__mmask16)~flat);
        __m512 sum_l = zero, sum_l2 = zero, sum_xl = zero;
        for (int i = 0; i < n; ++i) {
            __m512 v = _mm512_mul_ps(iscale, xm[i]);
            __m512 lf = exact ? _mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(_mm512_add_ps(v, magic), magic), zero), fmax_code)
                              : _mm512_cvtepi32_ps(clamp16(nearest16(v), 0, nmax));
            aux[i] = lf;
            __m512 wl = _mm512_mul_ps(ws[i], lf);
            sum_l = _mm512_add_ps(sum_l, wl);
            sum_l2 = _mm512_add_ps(sum_l2, _mm512_mul_ps(wl, lf));
            sum_xl = _mm512_add_ps(sum_xl, _mm512_mul_ps(wl, xs[i]));
        }
        __m512 D = _mm512_sub_ps(_mm512_mul_ps(sum_w, sum_l2), _mm512_mul_ps(sum_l, sum_l));
        const __mmask16 dpos = _mm512_cmp_ps_mask(D, zero, _CMP_GT_OQ);
        if (!dpos) continue;
        __m512 this_scale = _mm512_div_ps(_mm512_sub_ps(_mm512_mul_ps(sum_w, sum_xl), _mm512_mul_ps(sum_x, sum_l)), D);
        __m512 this_min = _mm512_div_ps(_mm512_sub_ps(_mm512_mul_ps(sum_l2, sum_x), _mm512_mul_ps(sum_l, sum_xl)), D);
        const __mmask16 mpos = _mm512_cmp_ps_mask(this_min, zero, _CMP_GT_OQ);
        this_min = _mm512_mask_blend_ps(mpos, this_min, zero);
        this_scale = _mm512_mask_blend_ps(mpos, this_scale, _mm512_div_ps(sum_xl, sum_l2));
        __m512 cur = zero;
        for (int i = 0; i < n; ++i) {
            __m512 diff = err16(this_scale, aux[i], this_min, xs[i], use_mad);
            cur = _mm512_add_ps(cur, _mm512_mul_ps(ws[i], diff));
        }
        const __mmask16 upd = dpos & _mm512_cmp_ps_mask(cur, best, _CMP_LT_OQ);
        if (!upd) continue;
        best = _mm512_mask_blend_ps(upd, best, cur);
        scale = _mm512_mask_blend_ps(upd, scale, this_scale);
        min = _mm512_mask_blend_ps(upd, min, this_min);
        for (int i = 0; i < n; ++i) {
            best_l[i] = _mm512_mask_blend_ps(upd, best_l[i], aux[i]);
            xm[i] = _mm512_sub_ps(xs[i], min);
        }
    }
    /* flat groups: codes 0, scale 0, the min as found */
    __m512i codes[32];
    for (int i = 0; i < n; ++i) codes[i] = _mm512_maskz_mov_epi32((__mmask16)~flat, _mm512_cvtps_epi32(best_l[i]));
    _mm512_storeu_ps(scale_out, _mm512_mask_blend_ps(flat, scale, zero));
    _mm512_storeu_ps(the_min, neg16(_mm512_mask_blend_ps(flat, min, flat_min)));
    store_codes_u8(codes, n, L);
}

/* make_qx_quants' codes by the float route (exact: the AVX2 twin's qx_code
 * says why) */
static inline __m512 qx_code(__m512 iscale, __m512 x, __m512 lo, __m512 hi)
{
    const __m512 magic = _mm512_set1_ps(12582912.f);
    __m512 r = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(iscale, x), magic), magic);
    return _mm512_min_ps(_mm512_max_ps(r, lo), hi);
}

static void qx16_avx512(int n, int nmax, const float *x, const float *qw, int8_t *L, float *scale_out)
{
    const __m512 zero = _mm512_setzero_ps();
    const __m512 lo = _mm512_set1_ps((float)-nmax), hi = _mm512_set1_ps((float)(nmax - 1));
    __m512 xs[32], ws[32], wx[32];
    __m512 max = zero, amax = zero;
    for (int i = 0; i < n; ++i) {
        xs[i] = _mm512_loadu_ps(x + 16 * i);
        ws[i] = qw ? _mm512_loadu_ps(qw + 16 * i) : _mm512_mul_ps(xs[i], xs[i]);
        wx[i] = _mm512_mul_ps(ws[i], xs[i]); /* ggml's w * x[i] * l is (w * x[i]) * l */
        __m512 ax = abs16(xs[i]);
        const __mmask16 gt = _mm512_cmp_ps_mask(ax, amax, _CMP_GT_OQ);
        amax = _mm512_mask_blend_ps(gt, amax, ax);
        max = _mm512_mask_blend_ps(gt, max, xs[i]);
    }
    const __mmask16 small = _mm512_cmp_ps_mask(amax, _mm512_set1_ps(LB__GGML_GROUP_EPS), _CMP_LT_OQ);
    /* the 19 trials' sums two at a time, the choice after (as the AVX2 twin) */
    __m512 iscales[19], sumlx[19], suml2[19];
    for (int t = 0; t < 19; ++t) {
        const int is = t == 0 ? 0 : t <= 9 ? t - 10 : t - 9; /* 0, then -9 .. -1, 1 .. 9 */
        iscales[t] = t == 0 ? _mm512_div_ps(_mm512_set1_ps((float)-nmax), max)
                            : _mm512_div_ps(_mm512_set1_ps(-((float)nmax + 0.1f * (float)is)), max);
    }
    for (int t = 0; t < 19; t += 2) {
        const int pair = t + 1 < 19;
        __m512 sa = zero, qa = zero, sb = zero, qb = zero;
        for (int i = 0; i < n; ++i) {
            __m512 la = qx_code(iscales[t], xs[i], lo, hi);
            sa = _mm512_add_ps(sa, _mm512_mul_ps(wx[i], la));
            qa = _mm512_add_ps(qa, _mm512_mul_ps(_mm512_mul_ps(ws[i], la), la));
            if (pair) {
                __m512 lb = qx_code(iscales[t + 1], xs[i], lo, hi);
                sb = _mm512_add_ps(sb, _mm512_mul_ps(wx[i], lb));
                qb = _mm512_add_ps(qb, _mm512_mul_ps(_mm512_mul_ps(ws[i], lb), lb));
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
    __m512 scale = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(suml2[0], zero, _CMP_NEQ_UQ), _mm512_div_ps(sumlx[0], suml2[0]));
    __m512 best = _mm512_mul_ps(scale, sumlx[0]);
    __m512 chosen = iscales[0];
    for (int t = 1; t < 19; ++t) {
        const __mmask16 upd =
            _mm512_cmp_ps_mask(suml2[t], zero, _CMP_GT_OQ) &
            _mm512_cmp_ps_mask(_mm512_mul_ps(sumlx[t], sumlx[t]), _mm512_mul_ps(best, suml2[t]), _CMP_GT_OQ);
        __m512 s = _mm512_div_ps(sumlx[t], suml2[t]);
        scale = _mm512_mask_blend_ps(upd, scale, s);
        best = _mm512_mask_blend_ps(upd, best, _mm512_mul_ps(s, sumlx[t]));
        chosen = _mm512_mask_blend_ps(upd, chosen, iscales[t]);
    }
    const __m512i vn = _mm512_set1_epi32(nmax);
    __m512i codes[32];
    for (int i = 0; i < n; ++i)
        codes[i] = _mm512_maskz_add_epi32((__mmask16)~small, _mm512_cvtps_epi32(qx_code(chosen, xs[i], lo, hi)), vn);
    _mm512_storeu_ps(scale_out, _mm512_mask_blend_ps(small, scale, zero));
    store_codes_u8(codes, n, (uint8_t *)L);
}

/* ---- the lanes' layout ---- */

/* A 16 x 16 transpose in registers: r[j] lane k becomes r[k] lane j. Pairs
 * of rows interleaved, then pairs of pairs, then the 128-bit quarters:
 * 64 shuffles for 256 values, where element by element it took 256 loads
 * and stores (8% of a one-thread Q4_K_M run of SmolLM2). */
static inline void transpose16x16(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 4; k++) { /* u[4k + j], quarter q: column 4q + j of rows 4k .. 4k + 3 */
        u[4 * k] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        u[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
        u[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        u[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        __m512 ab_lo = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44), ab_hi = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
        __m512 cd_lo = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
        __m512 cd_hi = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
        r[j] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0x88);
        r[4 + j] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0xDD);
        r[8 + j] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0xDD);
    }
}

/* t[16 i + g] = src[g n + i] for i < n, group g < groups at src + g n;
 * lanes from groups on repeat group 0. n a multiple of 16. */
static void interleave16_avx512(const float *src, int n, int groups, float *t)
{
    for (int i0 = 0; i0 < n; i0 += 16) {
        __m512 r[16];
        for (int g = 0; g < 16; g++) r[g] = _mm512_loadu_ps(src + (g < groups ? (size_t)g : 0) * (size_t)n + i0);
        transpose16x16(r);
        for (int i = 0; i < 16; i++) _mm512_storeu_ps(t + 16 * (i0 + i), r[i]);
    }
}

/* dst[g n + i] = t[16 i + g] for g < groups, i < n: the codes back to
 * group order (bytes widened to 32-bit lanes, transposed, narrowed). n a
 * multiple of 16. */
static void deinterleave16_avx512(const uint8_t *t, int n, int groups, uint8_t *dst)
{
    for (int i0 = 0; i0 < n; i0 += 16) {
        __m512 r[16];
        for (int i = 0; i < 16; i++)
            r[i] = _mm512_castsi512_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(t + 16 * (i0 + i)))));
        transpose16x16(r);
        for (int g = 0; g < groups; g++) {
            __m128i codes = _mm512_cvtepi32_epi8(_mm512_castps_si512(r[g]));
            _mm_storeu_si128((__m128i *)(dst + (size_t)g * (size_t)n + i0), codes);
        }
    }
}

const lb__ggml_search16 lb__ggml_search16_avx512 = {qkx16_avx512, qx16_avx512, interleave16_avx512,
                                                    deinterleave16_avx512};
#else
const lb__ggml_search16 lb__ggml_search16_avx512 = {0};
#endif

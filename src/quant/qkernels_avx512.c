/* AVX-512 twins of the quantization loops in qkernels_scalar.c. A block's
 * partial last vector is loaded and stored under a mask, so any block size
 * runs in vector code. block_absmax and block_minmax are also the finite
 * check: they flag NaN and infinity, and their results are then unused. */
#include "quant/qkernels.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>
#include <string.h>

#include "util/tree16_avx512.h"

static inline __mmask16 tail_mask(size_t k) { return (__mmask16)((1u << k) - 1); }

/* lb__sum16f in registers, the same additions in the same order. */
static inline float sum16(__m512 s)
{
    __m256 t8 = _mm256_add_ps(_mm512_castps512_ps256(s), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1)); /* t[i] + t[i+4] */
    __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));                                /* t0+t2, t1+t3 */
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
}

/* lanes whose |v| is infinite or NaN (not less than inf, unordered) */
static inline __mmask16 nonfinite(__m512 absv) { return _mm512_cmp_ps_mask(absv, _mm512_set1_ps(__builtin_inff()), _CMP_NLT_UQ); }

/* The magnitudes' bits: for non-negative floats the unsigned integer order
 * is the numeric order, and infinity and NaN sort above every finite value,
 * so an integer max finds the largest magnitude and flags a non-finite one
 * with a compare at the end instead of one per vector (5-12% faster). */
/* lb__sum16f of 16 vectors at once, lane j for vector j. */
static inline __m512 sum16x16(const __m512 m[16]) { return lb__tree16x16_avx512(m, LB__TREE_SUM); }

static int block_absmax(const float *x, size_t n, size_t block, float *out)
{
    const __m512i signless = _mm512_set1_epi32(0x7FFFFFFF);
    __m512i seen = _mm512_setzero_si512();
    if (block == 16) { /* NVFP4's blocks: 16 at a time while 16 whole ones remain */
        size_t b = 0;
        for (; (b + 16) * 16 <= n; b += 16) { /* one tree for 16 blocks: a reduction per block took 8 steps */
            __m512 v[16];
            for (int k = 0; k < 16; k++)
                v[k] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(x + (b + k) * 16), signless));
            __m512i m = _mm512_castps_si512(lb__tree16x16_avx512(v, LB__TREE_MAGNITUDE_MAX));
            seen = _mm512_max_epu32(seen, m);
            _mm512_storeu_si512(out + b, m);
        }
        x += b * 16, n -= b * 16, out += b;
    }
    FOR_BLOCKS(n, block) {
        const float *p = x + start;
        __m512i m = _mm512_setzero_si512();
        size_t i = 0;
        for (; i + 16 <= len; i += 16) m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_loadu_si512(p + i), signless));
        if (i < len) m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_maskz_loadu_epi32(tail_mask(len - i), p + i), signless));
        seen = _mm512_max_epu32(seen, m);
        uint32_t bits = _mm512_reduce_max_epu32(m);
        memcpy(&out[b], &bits, sizeof bits);
    }
    return _mm512_cmpgt_epu32_mask(seen, _mm512_set1_epi32(0x7F7FFFFF)) != 0;
}

/* The four rows side by side, a vector of each in turn (qkernels.h). */
static int rows4_absmax(const float *const rows[4], size_t n, float out[4])
{
    const __m512i signless = _mm512_set1_epi32(0x7FFFFFFF);
    __m512i m[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; k++)
            m[k] = _mm512_max_epu32(m[k], _mm512_and_si512(_mm512_loadu_si512(rows[k] + i), signless));
    if (i < n)
        for (int k = 0; k < 4; k++) {
            __m512i v = _mm512_maskz_loadu_epi32(tail_mask(n - i), rows[k] + i);
            m[k] = _mm512_max_epu32(m[k], _mm512_and_si512(v, signless));
        }
    __m512i seen = _mm512_max_epu32(_mm512_max_epu32(m[0], m[1]), _mm512_max_epu32(m[2], m[3]));
    for (int k = 0; k < 4; k++) {
        uint32_t bits = _mm512_reduce_max_epu32(m[k]);
        memcpy(&out[k], &bits, sizeof bits);
    }
    return _mm512_cmpgt_epu32_mask(seen, _mm512_set1_epi32(0x7F7FFFFF)) != 0;
}

static int block_minmax(const float *x, size_t n, size_t block, float *lo, float *hi)
{
    const __m512 signless = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    __mmask16 bad = 0;
    FOR_BLOCKS(n, block) {
        const float *p = x + start;
        __m512 a = _mm512_setzero_ps(), c = _mm512_setzero_ps();
        size_t i = 0;
        for (; i + 16 <= len; i += 16) {
            __m512 v = _mm512_loadu_ps(p + i);
            bad |= nonfinite(_mm512_and_ps(v, signless));
            a = _mm512_min_ps(a, v), c = _mm512_max_ps(c, v);
        }
        if (i < len) { /* masked-off lanes load 0, which both already hold */
            __m512 v = _mm512_maskz_loadu_ps(tail_mask(len - i), p + i);
            bad |= nonfinite(_mm512_and_ps(v, signless));
            a = _mm512_min_ps(a, v), c = _mm512_max_ps(c, v);
        }
        lo[b] = _mm512_reduce_min_ps(a) + 0.0f, hi[b] = _mm512_reduce_max_ps(c) + 0.0f;
    }
    return bad != 0;
}

static void block_div_clamp(const float *x, size_t n, size_t block, const float *div, const float *add, float lo,
                            float hi, float *out)
{
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    FOR_BLOCKS(n, block) {
        const __m512 vd = _mm512_set1_ps(div[b]), va = _mm512_set1_ps(add[b]);
        size_t i = start, end = start + len;
        for (; i + 16 <= end; i += 16) {
            __m512 y = _mm512_add_ps(_mm512_div_ps(_mm512_loadu_ps(x + i), vd), va);
            _mm512_storeu_ps(out + i, _mm512_min_ps(_mm512_max_ps(y, vlo), vhi));
        }
        if (i < end) {
            __mmask16 k = tail_mask(end - i);
            __m512 y = _mm512_add_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), vd), va);
            _mm512_mask_storeu_ps(out + i, k, _mm512_min_ps(_mm512_max_ps(y, vlo), vhi));
        }
    }
}

static void block_sub_mul(const float *x, size_t n, size_t block, const float *sub, const float *mul, float *out)
{
    FOR_BLOCKS(n, block) {
        const __m512 vs = _mm512_set1_ps(sub[b]), vm = _mm512_set1_ps(mul[b]);
        size_t i = start, end = start + len;
        for (; i + 16 <= end; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs), vm));
        if (i < end) {
            __mmask16 k = tail_mask(end - i);
            _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vs), vm));
        }
    }
}

static void block_scaled_err(const float *x, const float *q, size_t n, size_t block, const float *div,
                             const float *add, float *out)
{
    FOR_BLOCKS(n, block) {
        const __m512 vd = _mm512_set1_ps(div[b]), va = _mm512_set1_ps(add[b]);
        __m512 acc = _mm512_setzero_ps();
        for (size_t i = 0; i < len; i += 16) {
            __mmask16 k = len - i >= 16 ? (__mmask16)0xFFFF : tail_mask(len - i);
            __m512 y = _mm512_add_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(k, x + start + i), vd), va);
            __m512 e = _mm512_maskz_sub_ps(k, y, _mm512_maskz_loadu_ps(k, q + start + i)); /* off lanes: 0 */
            acc = _mm512_add_ps(acc, _mm512_mul_ps(e, e));
        }
        out[b] = sum16(acc);
    }
}

/* x / d, the same bits as the division, which bounds the trials here
 * (vdivps zmm issues one vector in about ten cycles): Markstein's
 * correction. With r = RN(1/d) and p = RN(x * r), within an ulp of x / d,
 * the residual x - p * d is exact in one fma and RN(p + residual * r) is
 * RN(x / d) (Markstein 1990, IBM J. Res. Dev. 34(1); Cornea, Harrison and
 * Tang 2002), provided nothing under- or overflows. So it is used where
 * |d| lies in [2^-40, 2^40] (lb__exact_recip gives NaN for any other d,
 * which fails the lanes' check) and every lane's |p| in [2^-40, 2^40),
 * else the vector is divided (zeros too: a zero p fails the check). The
 * bounds keep the reciprocal and the residual normal, as the proof needs;
 * just outside them the results measured equal too, so no test tells the
 * bounds from looser ones (tests/unit/test_quant_kernels.c checks the
 * quotients at and across them, and near every rounding midpoint). */
static inline __m512 quotient(__m512 x, __m512 vd, __m512 vr)
{
    const __m512i lo_bits = _mm512_set1_epi32(0x2B800000), span = _mm512_set1_epi32(0x53800000 - 0x2B800000);
    __m512 p = _mm512_mul_ps(x, vr);
    __m512i a = _mm512_and_si512(_mm512_castps_si512(p), _mm512_set1_epi32(0x7FFFFFFF));
    if (_mm512_cmp_epu32_mask(_mm512_sub_epi32(a, lo_bits), span, _MM_CMPINT_NLT)) return _mm512_div_ps(x, vd);
    return _mm512_fmadd_ps(_mm512_fnmadd_ps(p, vd, x), vr, p);
}

/* One block's partial sums (lane k: elements k, k+16, ...) of the fused
 * integer trial; vr is lb__exact_recip of the block's divisor. */
static inline __m512 trial_int_lanes(const float *x, size_t len, __m512 vd, __m512 vr, __m512 va, __m512 vlo,
                                     __m512 vhi)
{
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= len; i += 16) {
        __m512 y = _mm512_add_ps(quotient(_mm512_loadu_ps(x + i), vd, vr), va);
        __m512 c = _mm512_roundscale_ps(_mm512_min_ps(_mm512_max_ps(y, vlo), vhi),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 e = _mm512_sub_ps(y, c);
        acc = _mm512_add_ps(acc, _mm512_mul_ps(e, e));
    }
    if (i < len) {
        __mmask16 k = tail_mask(len - i);
        __m512 y = _mm512_add_ps(quotient(_mm512_maskz_loadu_ps(k, x + i), vd, vr), va);
        __m512 c = _mm512_roundscale_ps(_mm512_min_ps(_mm512_max_ps(y, vlo), vhi),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 e = _mm512_maskz_sub_ps(k, y, c);
        acc = _mm512_add_ps(acc, _mm512_mul_ps(e, e));
    }
    return acc;
}

static void block_trial_err_int(const float *x, size_t n, size_t block, const float *div, const float *add, float lo,
                                float hi, float *out)
{
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    size_t b0 = 0;
    /* 16 whole blocks at a time: their sums reduce together, not one by one */
    for (size_t full = n / block; b0 + 16 <= full; b0 += 16) {
        __m512 acc[16];
        float r[16]; /* lb__exact_recip of the 16 divisors, in one division */
        __m512 vd16 = _mm512_loadu_ps(div + b0), a16 = _mm512_abs_ps(vd16);
        __mmask16 in = _mm512_cmp_ps_mask(a16, _mm512_set1_ps(LB__EXACT_MIN), _CMP_GE_OQ) &
                       _mm512_cmp_ps_mask(a16, _mm512_set1_ps(LB__EXACT_MAX), _CMP_LE_OQ);
        _mm512_storeu_ps(r, _mm512_mask_div_ps(_mm512_set1_ps(NAN), in, _mm512_set1_ps(1.0f), vd16));
        for (int j = 0; j < 16; j++) {
            size_t b = b0 + (size_t)j;
            acc[j] = trial_int_lanes(x + b * block, block, _mm512_set1_ps(div[b]), _mm512_set1_ps(r[j]),
                                     _mm512_set1_ps(add[b]), vlo, vhi);
        }
        _mm512_storeu_ps(out + b0, sum16x16(acc));
    }
    size_t rest = b0 * block;
    FOR_BLOCKS(n - rest, block) {
        size_t bb = b0 + b;
        out[bb] = sum16(trial_int_lanes(x + rest + start, len, _mm512_set1_ps(div[bb]),
                                        _mm512_set1_ps(lb__exact_recip(div[bb])), _mm512_set1_ps(add[bb]), vlo, vhi));
    }
}

static size_t first_nonfinite(const float *x, size_t n)
{
    const __m512 inf = _mm512_set1_ps(__builtin_inff());
    const __m512 signless = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        if (_mm512_cmp_ps_mask(_mm512_and_ps(_mm512_loadu_ps(x + i), signless), inf, _CMP_NLT_UQ)) break; /* >= inf or NaN */
    return i + lb__qkernels_scalar.first_nonfinite(x + i, n - i);
}

/* lb__full_range_scale and lb__signed_scale 16 blocks at a time: the same
 * operations, so the same bits (a NaN compares false in both) */
static void full_range_scales(const float *lo, const float *hi, size_t n, float ratio, float den_lo, float den_hi,
                              float *out)
{
    const __m512 vr = _mm512_set1_ps(ratio), vdl = _mm512_set1_ps(den_lo), vdh = _mm512_set1_ps(den_hi);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (size_t b = 0; b < n; b += 16) {
        __mmask16 k = n - b >= 16 ? (__mmask16)0xFFFF : tail_mask(n - b);
        __m512 l = _mm512_maskz_loadu_ps(k, lo + b), h = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, hi + b), vr);
        __m512 a = _mm512_div_ps(_mm512_mul_ps(_mm512_xor_ps(l, sign), vr), vdl);
        __mmask16 keep_a = _mm512_cmp_ps_mask(_mm512_mul_ps(a, vdh), h, _CMP_GE_OQ);
        _mm512_mask_storeu_ps(out + b, k, _mm512_mask_blend_ps(keep_a, _mm512_div_ps(h, vdh), a));
    }
}

static void signed_scales(const float *lo, const float *hi, size_t n, float ratio, float qmin, float *out)
{
    const __m512 vr = _mm512_set1_ps(ratio), vq = _mm512_set1_ps(qmin), sign = _mm512_set1_ps(-0.0f);
    for (size_t b = 0; b < n; b += 16) {
        __mmask16 k = n - b >= 16 ? (__mmask16)0xFFFF : tail_mask(n - b);
        __m512 l = _mm512_maskz_loadu_ps(k, lo + b), h = _mm512_maskz_loadu_ps(k, hi + b);
        __m512 m = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(_mm512_xor_ps(l, sign), h, _CMP_GE_OQ), h, l);
        _mm512_mask_storeu_ps(out + b, k, _mm512_div_ps(_mm512_mul_ps(m, vr), vq));
    }
}

const lb__qkernels lb__qkernels_avx512 = {block_absmax, rows4_absmax, block_minmax, block_div_clamp, block_sub_mul,
                                          block_scaled_err, block_trial_err_int, first_nonfinite, full_range_scales,
                                          signed_scales};
#else
const lb__qkernels lb__qkernels_avx512 = {0};
#endif

/* AVX2 twins of the quantization loops in qkernels_scalar.c (see the
 * AVX-512 file); partial vectors go through maskload/maskstore. */
#include "quant/qkernels.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

/* lanes [0, k) on, for k in 0..8 */
static inline __m256i tail_mask(size_t k)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hmax(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline float hmin(__m256 v)
{
    __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_min_ps(m, _mm_movehl_ps(m, m));
    m = _mm_min_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* lanes whose |v| is infinite or NaN (not less than inf, unordered) */
static inline __m256 nonfinite(__m256 absv) { return _mm256_cmp_ps(absv, _mm256_set1_ps(__builtin_inff()), _CMP_NLT_UQ); }

static int block_absmax(const float *x, size_t n, size_t block, float *out)
{
    const __m256 signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 bad = _mm256_setzero_ps();
    FOR_BLOCKS(n, block) {
        const float *p = x + start;
        __m256 m = _mm256_setzero_ps();
        size_t i = 0;
        for (; i + 8 <= len; i += 8) {
            __m256 a = _mm256_and_ps(_mm256_loadu_ps(p + i), signless);
            bad = _mm256_or_ps(bad, nonfinite(a));
            m = _mm256_max_ps(m, a);
        }
        if (i < len) {
            __m256 a = _mm256_and_ps(_mm256_maskload_ps(p + i, tail_mask(len - i)), signless);
            bad = _mm256_or_ps(bad, nonfinite(a));
            m = _mm256_max_ps(m, a);
        }
        out[b] = hmax(m);
    }
    return _mm256_movemask_ps(bad) != 0;
}

static int block_minmax(const float *x, size_t n, size_t block, float *lo, float *hi)
{
    const __m256 signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 bad = _mm256_setzero_ps();
    FOR_BLOCKS(n, block) {
        const float *p = x + start;
        __m256 a = _mm256_setzero_ps(), c = _mm256_setzero_ps();
        size_t i = 0;
        for (; i + 8 <= len; i += 8) {
            __m256 v = _mm256_loadu_ps(p + i);
            bad = _mm256_or_ps(bad, nonfinite(_mm256_and_ps(v, signless)));
            a = _mm256_min_ps(a, v), c = _mm256_max_ps(c, v);
        }
        if (i < len) {
            __m256 v = _mm256_maskload_ps(p + i, tail_mask(len - i));
            bad = _mm256_or_ps(bad, nonfinite(_mm256_and_ps(v, signless)));
            a = _mm256_min_ps(a, v), c = _mm256_max_ps(c, v);
        }
        lo[b] = hmin(a) + 0.0f, hi[b] = hmax(c) + 0.0f;
    }
    return _mm256_movemask_ps(bad) != 0;
}

static void block_div_clamp(const float *x, size_t n, size_t block, const float *div, const float *add, float lo,
                            float hi, float *out)
{
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    FOR_BLOCKS(n, block) {
        const __m256 vd = _mm256_set1_ps(div[b]), va = _mm256_set1_ps(add[b]);
        size_t i = start, end = start + len;
        for (; i + 8 <= end; i += 8) {
            __m256 y = _mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vd), va);
            _mm256_storeu_ps(out + i, _mm256_min_ps(_mm256_max_ps(y, vlo), vhi));
        }
        if (i < end) {
            __m256i k = tail_mask(end - i);
            __m256 y = _mm256_add_ps(_mm256_div_ps(_mm256_maskload_ps(x + i, k), vd), va);
            _mm256_maskstore_ps(out + i, k, _mm256_min_ps(_mm256_max_ps(y, vlo), vhi));
        }
    }
}

static void block_sub_mul(const float *x, size_t n, size_t block, const float *sub, const float *mul, float *out)
{
    FOR_BLOCKS(n, block) {
        const __m256 vs = _mm256_set1_ps(sub[b]), vm = _mm256_set1_ps(mul[b]);
        size_t i = start, end = start + len;
        for (; i + 8 <= end; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs), vm));
        if (i < end) {
            __m256i k = tail_mask(end - i);
            _mm256_maskstore_ps(out + i, k, _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), vs), vm));
        }
    }
}

/* lb__sum16f in registers, the same additions in the same order: lo
 * holds partial sums 0-7, hi 8-15. */
static inline float sum16(__m256 lo, __m256 hi)
{
    __m256 t8 = _mm256_add_ps(lo, hi);                                                 /* s[i] + s[i+8] */
    __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1)); /* t[i] + t[i+4] */
    __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));                                /* t0+t2, t1+t3 */
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
}

static void block_scaled_err(const float *x, const float *q, size_t n, size_t block, const float *div,
                             const float *add, float *out)
{
    FOR_BLOCKS(n, block) {
        const __m256 vd = _mm256_set1_ps(div[b]), va = _mm256_set1_ps(add[b]);
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (size_t i = 0; i < len; i += 16) { /* 16 elements: partial sums 0-7, then 8-15 */
            for (int h = 0; h < 2; h++) {
                size_t at = i + 8 * (size_t)h, left = at < len ? len - at : 0;
                __m256i k = tail_mask(left < 8 ? left : 8);
                __m256 y = _mm256_add_ps(_mm256_div_ps(_mm256_maskload_ps(x + start + at, k), vd), va);
                __m256 e = _mm256_and_ps(_mm256_sub_ps(y, _mm256_maskload_ps(q + start + at, k)), _mm256_castsi256_ps(k));
                acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(e, e));
            }
        }
        out[b] = sum16(acc[0], acc[1]);
    }
}

/* x / d exactly without the division, where the operands allow:
 * Markstein's correction (qkernels_avx512.c, `quotient`, says why it is
 * exact and when). */
static inline __m256 quotient(__m256 x, __m256 vd, __m256 vr)
{
    const __m256i lo_bits = _mm256_set1_epi32(0x2B800000), hi_bits = _mm256_set1_epi32(0x53800000);
    __m256 p = _mm256_mul_ps(x, vr);
    __m256i a = _mm256_and_si256(_mm256_castps_si256(p), _mm256_set1_epi32(0x7FFFFFFF));
    /* |p| in [2^-40, 2^40) as integers (the magnitudes' bits, NaN above): signed compares suffice */
    __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(lo_bits, a), _mm256_cmpgt_epi32(a, _mm256_sub_epi32(hi_bits, _mm256_set1_epi32(1))));
    if (!_mm256_testz_si256(out, out)) return _mm256_div_ps(x, vd);
    return _mm256_fmadd_ps(_mm256_fnmadd_ps(p, vd, x), vr, p);
}

static void block_trial_err_int(const float *x, size_t n, size_t block, const float *div, const float *add, float lo,
                                float hi, float *out)
{
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    FOR_BLOCKS(n, block) {
        const __m256 vd = _mm256_set1_ps(div[b]), vr = _mm256_set1_ps(lb__exact_recip(div[b])), va = _mm256_set1_ps(add[b]);
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (size_t i = 0; i < len; i += 16) {
            for (int h = 0; h < 2; h++) {
                size_t at = i + 8 * (size_t)h, left = at < len ? len - at : 0;
                __m256i k = tail_mask(left < 8 ? left : 8);
                __m256 y = _mm256_add_ps(quotient(_mm256_maskload_ps(x + start + at, k), vd, vr), va);
                __m256 c = _mm256_round_ps(_mm256_min_ps(_mm256_max_ps(y, vlo), vhi),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                __m256 e = _mm256_and_ps(_mm256_sub_ps(y, c), _mm256_castsi256_ps(k));
                acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(e, e));
            }
        }
        out[b] = sum16(acc[0], acc[1]);
    }
}

static size_t first_nonfinite(const float *x, size_t n)
{
    const __m256 inf = _mm256_set1_ps(__builtin_inff());
    const __m256 signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), signless), inf, _CMP_NLT_UQ))) break;
    return i + lb__qkernels_scalar.first_nonfinite(x + i, n - i);
}

/* lb__full_range_scale and lb__signed_scale 8 blocks at a time: the same
 * operations, so the same bits (a NaN compares false in both) */
static void full_range_scales(const float *lo, const float *hi, size_t n, float ratio, float den_lo, float den_hi,
                              float *out)
{
    const __m256 vr = _mm256_set1_ps(ratio), vdl = _mm256_set1_ps(den_lo), vdh = _mm256_set1_ps(den_hi);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (size_t b = 0; b < n; b += 8) {
        __m256i k = tail_mask(n - b >= 8 ? 8 : n - b);
        __m256 l = _mm256_maskload_ps(lo + b, k), h = _mm256_mul_ps(_mm256_maskload_ps(hi + b, k), vr);
        __m256 a = _mm256_div_ps(_mm256_mul_ps(_mm256_xor_ps(l, sign), vr), vdl);
        __m256 keep_a = _mm256_cmp_ps(_mm256_mul_ps(a, vdh), h, _CMP_GE_OQ);
        _mm256_maskstore_ps(out + b, k, _mm256_blendv_ps(_mm256_div_ps(h, vdh), a, keep_a));
    }
}

static void signed_scales(const float *lo, const float *hi, size_t n, float ratio, float qmin, float *out)
{
    const __m256 vr = _mm256_set1_ps(ratio), vq = _mm256_set1_ps(qmin), sign = _mm256_set1_ps(-0.0f);
    for (size_t b = 0; b < n; b += 8) {
        __m256i k = tail_mask(n - b >= 8 ? 8 : n - b);
        __m256 l = _mm256_maskload_ps(lo + b, k), h = _mm256_maskload_ps(hi + b, k);
        __m256 m = _mm256_blendv_ps(h, l, _mm256_cmp_ps(_mm256_xor_ps(l, sign), h, _CMP_GE_OQ));
        _mm256_maskstore_ps(out + b, k, _mm256_div_ps(_mm256_mul_ps(m, vr), vq));
    }
}

static int rows4_absmax(const float *const rows[4], size_t n, float out[4])
{
    return lb__rows4_one_by_one(block_absmax, rows, n, out);
}

const lb__qkernels lb__qkernels_avx2 = {block_absmax, rows4_absmax, block_minmax, block_div_clamp, block_sub_mul,
                                        block_scaled_err, block_trial_err_int, first_nonfinite, full_range_scales,
                                        signed_scales};
#else
const lb__qkernels lb__qkernels_avx2 = {0};
#endif

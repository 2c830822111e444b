/* AVX-512 twins of the quantization loops in qkernels_scalar.c. A block's
 * partial last vector is loaded and stored under a mask, so any block size
 * runs in vector code. block_absmax and block_minmax are also the finite
 * check: they flag NaN and infinity, and their results are then unused. */
#include "quant/qkernels.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>

static inline __mmask16 tail_mask(size_t k) { return (__mmask16)((1u << k) - 1); }

/* lb__sum16 in registers, the same additions in the same order: lo holds
 * partial sums 0-7, hi 8-15. */
static inline double sum16(__m512d lo, __m512d hi)
{
    __m512d t8 = _mm512_add_pd(lo, hi);                                                      /* s[i] + s[i+8] */
    __m256d t4 = _mm256_add_pd(_mm512_castpd512_pd256(t8), _mm512_extractf64x4_pd(t8, 1)); /* t[i] + t[i+4] */
    __m128d t2 = _mm_add_pd(_mm256_castpd256_pd128(t4), _mm256_extractf128_pd(t4, 1));      /* t0+t2, t1+t3 */
    return _mm_cvtsd_f64(_mm_add_sd(t2, _mm_unpackhi_pd(t2, t2)));
}

/* lanes whose |v| is infinite or NaN (not less than inf, unordered) */
static inline __mmask16 nonfinite(__m512 absv) { return _mm512_cmp_ps_mask(absv, _mm512_set1_ps(__builtin_inff()), _CMP_NLT_UQ); }

static int block_absmax(const float *x, size_t n, size_t block, float *out)
{
    const __m512 signless = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    __mmask16 bad = 0;
    FOR_BLOCKS(n, block) {
        const float *p = x + start;
        __m512 m = _mm512_setzero_ps();
        size_t i = 0;
        for (; i + 16 <= len; i += 16) {
            __m512 a = _mm512_and_ps(_mm512_loadu_ps(p + i), signless);
            bad |= nonfinite(a);
            m = _mm512_max_ps(m, a);
        }
        if (i < len) {
            __m512 a = _mm512_and_ps(_mm512_maskz_loadu_ps(tail_mask(len - i), p + i), signless);
            bad |= nonfinite(a);
            m = _mm512_max_ps(m, a);
        }
        out[b] = _mm512_reduce_max_ps(m);
    }
    return bad != 0;
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

static void block_sq_err(const float *x, const float *y, size_t n, size_t block, double *out)
{
    FOR_BLOCKS(n, block) {
        /* partial sum k % 16: lanes 0-7 in lo, 8-15 in hi */
        __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
        size_t i = 0;
        for (; i < len; i += 16) {
            __mmask16 k = len - i >= 16 ? (__mmask16)0xFFFF : tail_mask(len - i);
            __m512 a = _mm512_maskz_loadu_ps(k, x + start + i), c = _mm512_maskz_loadu_ps(k, y + start + i);
            __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(a)),
                                       _mm512_cvtps_pd(_mm512_castps512_ps256(c)));
            __m512d d1 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))),
                                       _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c), 1))));
            lo = _mm512_add_pd(lo, _mm512_mul_pd(d0, d0));
            hi = _mm512_add_pd(hi, _mm512_mul_pd(d1, d1));
        }
        out[b] = sum16(lo, hi);
    }
}

static void block_trial_err_int(const float *x, size_t n, size_t block, const float *div, const float *add, float lo,
                                float hi, const float *sub, const float *mul, double *err)
{
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    FOR_BLOCKS(n, block) {
        const __m512 vd = _mm512_set1_ps(div[b]), va = _mm512_set1_ps(add[b]);
        const __m512 vs = _mm512_set1_ps(sub[b]), vm = _mm512_set1_ps(mul[b]);
        __m512d accl = _mm512_setzero_pd(), acch = _mm512_setzero_pd();
        for (size_t i = 0; i < len; i += 16) {
            __mmask16 k = len - i >= 16 ? (__mmask16)0xFFFF : tail_mask(len - i);
            __m512 v = _mm512_maskz_loadu_ps(k, x + start + i);
            __m512 y = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(_mm512_div_ps(v, vd), va), vlo), vhi);
            __m512 q = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m512 xh = _mm512_maskz_mov_ps(k, _mm512_mul_ps(_mm512_sub_ps(q, vs), vm)); /* off lanes: 0 - 0 */
            __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), _mm512_cvtps_pd(_mm512_castps512_ps256(xh)));
            __m512d d1 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))),
                                       _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xh), 1))));
            accl = _mm512_add_pd(accl, _mm512_mul_pd(d0, d0));
            acch = _mm512_add_pd(acch, _mm512_mul_pd(d1, d1));
        }
        err[b] = sum16(accl, acch);
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

const lb__qkernels lb__qkernels_avx512 = {block_absmax, block_minmax, block_div_clamp, block_sub_mul, block_sq_err,
                                          block_trial_err_int, first_nonfinite};
#else
const lb__qkernels lb__qkernels_avx512 = {0};
#endif

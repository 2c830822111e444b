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

/* lb__sum16 in registers, the same additions in the same order: acc[q]
 * holds partial sums 4q..4q+3. */
static inline double sum16(const __m256d acc[4])
{
    __m256d a = _mm256_add_pd(acc[0], acc[2]), b = _mm256_add_pd(acc[1], acc[3]); /* s[i] + s[i+8] */
    __m256d t4 = _mm256_add_pd(a, b);                                             /* t[i] + t[i+4] */
    __m128d t2 = _mm_add_pd(_mm256_castpd256_pd128(t4), _mm256_extractf128_pd(t4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t2, _mm_unpackhi_pd(t2, t2)));
}

/* squared differences of 4 floats, widened to double */
static inline __m256d sq4(__m128 a, __m128 c)
{
    __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(a), _mm256_cvtps_pd(c));
    return _mm256_mul_pd(d, d);
}

static void block_sq_err(const float *x, const float *y, size_t n, size_t block, double *out)
{
    FOR_BLOCKS(n, block) {
        __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
        for (size_t i = 0; i < len; i += 16) { /* 16 elements: partial sums 0-3, 4-7, 8-11, 12-15 */
            for (int h = 0; h < 2; h++) {
                size_t at = i + 8 * (size_t)h, left = at < len ? len - at : 0;
                __m256i k = tail_mask(left < 8 ? left : 8);
                __m256 a = _mm256_maskload_ps(x + start + at, k), c = _mm256_maskload_ps(y + start + at, k);
                acc[2 * h] = _mm256_add_pd(acc[2 * h], sq4(_mm256_castps256_ps128(a), _mm256_castps256_ps128(c)));
                acc[2 * h + 1] = _mm256_add_pd(acc[2 * h + 1], sq4(_mm256_extractf128_ps(a, 1), _mm256_extractf128_ps(c, 1)));
            }
        }
        out[b] = sum16(acc);
    }
}

static void block_trial_err_int(const float *x, size_t n, size_t block, const float *div, const float *add, float lo,
                                float hi, const float *sub, const float *mul, double *err)
{
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    FOR_BLOCKS(n, block) {
        const __m256 vd = _mm256_set1_ps(div[b]), va = _mm256_set1_ps(add[b]);
        const __m256 vs = _mm256_set1_ps(sub[b]), vm = _mm256_set1_ps(mul[b]);
        __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
        for (size_t i = 0; i < len; i += 16) {
            for (int h = 0; h < 2; h++) {
                size_t at = i + 8 * (size_t)h, left = at < len ? len - at : 0;
                __m256i k = tail_mask(left < 8 ? left : 8);
                __m256 v = _mm256_maskload_ps(x + start + at, k);
                __m256 y = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(_mm256_div_ps(v, vd), va), vlo), vhi);
                __m256 q = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                __m256 xh = _mm256_and_ps(_mm256_mul_ps(_mm256_sub_ps(q, vs), vm), _mm256_castsi256_ps(k));
                acc[2 * h] = _mm256_add_pd(acc[2 * h], sq4(_mm256_castps256_ps128(v), _mm256_castps256_ps128(xh)));
                acc[2 * h + 1] = _mm256_add_pd(acc[2 * h + 1], sq4(_mm256_extractf128_ps(v, 1), _mm256_extractf128_ps(xh, 1)));
            }
        }
        err[b] = sum16(acc);
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

const lb__qkernels lb__qkernels_avx2 = {block_absmax, block_minmax, block_div_clamp, block_sub_mul, block_sq_err,
                                        block_trial_err_int, first_nonfinite};
#else
const lb__qkernels lb__qkernels_avx2 = {0};
#endif

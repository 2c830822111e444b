/* AVX2 twins of the quantization loops in qkernels_scalar.c; the tails
 * go through the scalar ones. Max and min here see no NaN: the caller has
 * rejected non-finite input first. */
#include "quant/qkernels.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

static float absmax(const float *x, size_t n)
{
    __m256 m = _mm256_setzero_ps();
    const __m256 signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), signless));
    float lanes[8], r = lb__qkernels_scalar.absmax(x + i, n - i);
    _mm256_storeu_ps(lanes, m);
    for (int k = 0; k < 8; k++) r = lanes[k] > r ? lanes[k] : r;
    return r;
}

static void minmax(const float *x, size_t n, float *lo, float *hi)
{
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        a = _mm256_min_ps(a, v);
        b = _mm256_max_ps(b, v);
    }
    float la[8], lb[8], ta, tb;
    lb__qkernels_scalar.minmax(x + i, n - i, &ta, &tb);
    _mm256_storeu_ps(la, a);
    _mm256_storeu_ps(lb, b);
    for (int k = 0; k < 8; k++) {
        ta = la[k] < ta ? la[k] : ta;
        tb = lb[k] > tb ? lb[k] : tb;
    }
    *lo = ta + 0.0f, *hi = tb + 0.0f; /* -0 and +0 alike, as in the scalar twin */
}

static void div_clamp(const float *x, size_t n, float s, float add, float lo, float hi, float *out)
{
    const __m256 vs = _mm256_set1_ps(s), va = _mm256_set1_ps(add), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 y = _mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), va);
        _mm256_storeu_ps(out + i, _mm256_min_ps(_mm256_max_ps(y, vlo), vhi));
    }
    lb__qkernels_scalar.div_clamp(x + i, n - i, s, add, lo, hi, out + i);
}

static void sub_mul(const float *x, size_t n, float sub, float s, float *out)
{
    const __m256 vs = _mm256_set1_ps(s), vsub = _mm256_set1_ps(sub);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vsub), vs));
    lb__qkernels_scalar.sub_mul(x + i, n - i, sub, s, out + i);
}

static size_t first_nonfinite(const float *x, size_t n)
{
    const __m256 inf = _mm256_set1_ps(__builtin_inff());
    const __m256 signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), signless);
        if (_mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ))) break; /* >= inf, or NaN */
    }
    return i + lb__qkernels_scalar.first_nonfinite(x + i, n - i);
}

const lb__qkernels lb__qkernels_avx2 = {absmax, minmax, div_clamp, sub_mul, first_nonfinite};

#else
const lb__qkernels lb__qkernels_avx2 = {0};
#endif

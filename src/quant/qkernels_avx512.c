/* AVX512 twins of the quantization loops in qkernels_scalar.c; the tails
 * go through the scalar ones. Max and min here see no NaN: the caller has
 * rejected non-finite input first. */
#include "quant/qkernels.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

static float absmax(const float *x, size_t n)
{
    __m512 m = _mm512_setzero_ps();
    const __m512 signless = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    size_t i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_and_ps(_mm512_loadu_ps(x + i), signless));
    float lanes[16], r = lb__qkernels_scalar.absmax(x + i, n - i);
    _mm512_storeu_ps(lanes, m);
    for (int k = 0; k < 16; k++) r = lanes[k] > r ? lanes[k] : r;
    return r;
}

static void minmax(const float *x, size_t n, float *lo, float *hi)
{
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        a = _mm512_min_ps(a, v);
        b = _mm512_max_ps(b, v);
    }
    float la[16], lb[16], ta, tb;
    lb__qkernels_scalar.minmax(x + i, n - i, &ta, &tb);
    _mm512_storeu_ps(la, a);
    _mm512_storeu_ps(lb, b);
    for (int k = 0; k < 16; k++) {
        ta = la[k] < ta ? la[k] : ta;
        tb = lb[k] > tb ? lb[k] : tb;
    }
    *lo = ta + 0.0f, *hi = tb + 0.0f; /* -0 and +0 alike, as in the scalar twin */
}

static void div_clamp(const float *x, size_t n, float s, float add, float lo, float hi, float *out)
{
    const __m512 vs = _mm512_set1_ps(s), va = _mm512_set1_ps(add), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 y = _mm512_add_ps(_mm512_div_ps(_mm512_loadu_ps(x + i), vs), va);
        _mm512_storeu_ps(out + i, _mm512_min_ps(_mm512_max_ps(y, vlo), vhi));
    }
    lb__qkernels_scalar.div_clamp(x + i, n - i, s, add, lo, hi, out + i);
}

static void sub_mul(const float *x, size_t n, float sub, float s, float *out)
{
    const __m512 vs = _mm512_set1_ps(s), vsub = _mm512_set1_ps(sub);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vsub), vs));
    lb__qkernels_scalar.sub_mul(x + i, n - i, sub, s, out + i);
}

static size_t first_nonfinite(const float *x, size_t n)
{
    const __m512 inf = _mm512_set1_ps(__builtin_inff());
    const __m512 signless = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 a = _mm512_and_ps(_mm512_loadu_ps(x + i), signless);
        if (_mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ)) break; /* >= inf, or NaN */
    }
    return i + lb__qkernels_scalar.first_nonfinite(x + i, n - i);
}

const lb__qkernels lb__qkernels_avx512 = {absmax, minmax, div_clamp, sub_mul, first_nonfinite};

#else
const lb__qkernels lb__qkernels_avx512 = {0};
#endif

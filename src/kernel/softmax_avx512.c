/* AVX-512 softmax (softmax.h): 16 scores at a time, the exp as lb__exp's
 * operations lane by lane, the sum in the 16 lanes of one register. */
#include "kernel/softmax.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>
#include <math.h>

#define AI static inline __attribute__((always_inline))

/* lb__exp, 16 lanes (the same operations in the same order) */
AI __m512 exp16(__m512 x)
{
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    /* max/min return their second operand for a NaN first one: NaN lanes
     * are put back at the end */
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(LB__EXP_LO)), _mm512_set1_ps(LB__EXP_HI));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(LB__EXP_LOG2E)), _MM_FROUND_CUR_DIRECTION);
    __m512 r = _mm512_add_ps(_mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(LB__EXP_C1))),
                             _mm512_mul_ps(n, _mm512_set1_ps(LB__EXP_C2)));
    __m512 p = _mm512_set1_ps(LB__EXP_P7);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(LB__EXP_P6));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(LB__EXP_P5));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(LB__EXP_P4));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(LB__EXP_P3));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(LB__EXP_P2));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    __m512i ni = _mm512_cvtps_epi32(n), e1 = _mm512_srai_epi32(ni, 1), e2 = _mm512_sub_epi32(ni, e1);
    __m512i bias = _mm512_set1_epi32(127);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e1, bias), 23));
    __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e2, bias), 23));
    return _mm512_mask_blend_ps(nan, _mm512_mul_ps(_mm512_mul_ps(p, s1), s2), x);
}

static void softmax(float *row, size_t valid, float scale)
{
    __m512 sc = _mm512_set1_ps(scale), mv = _mm512_set1_ps(-INFINITY);
    for (size_t p = 0; p < valid; p += 16) {
        __mmask16 m = valid - p >= 16 ? 0xFFFF : (__mmask16)((1u << (valid - p)) - 1);
        __m512 y = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + p), sc);
        _mm512_mask_storeu_ps(row + p, m, y);
        mv = _mm512_mask_max_ps(mv, m, y, mv); /* a NaN y keeps mv */
    }
    __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(mv)), sum = _mm512_setzero_ps();
    for (size_t p = 0; p < valid; p += 16) {
        __mmask16 m = valid - p >= 16 ? 0xFFFF : (__mmask16)((1u << (valid - p)) - 1);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + p), mx));
        _mm512_mask_storeu_ps(row + p, m, e);
        sum = _mm512_mask_add_ps(sum, m, sum, e); /* lanes past valid add nothing */
    }
    /* lane i + i+8, then i + i+4, i + i+2, i + i+1 */
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(sum), _mm512_extractf32x8_ps(sum, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    __m512 inv = _mm512_set1_ps(1.0f / _mm_cvtss_f32(s1));
    for (size_t p = 0; p < valid; p += 16) {
        __mmask16 m = valid - p >= 16 ? 0xFFFF : (__mmask16)((1u << (valid - p)) - 1);
        _mm512_mask_storeu_ps(row + p, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + p), inv));
    }
}

const lb__softmax_fn lb__softmax_avx512 = softmax;
#else
const lb__softmax_fn lb__softmax_avx512 = 0;
#endif

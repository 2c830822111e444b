/* AVX2 softmax (softmax.h): 8 scores at a time, the sum's 16 lanes in two
 * registers (scores 16k .. 16k+7 in the first, the next 8 in the second). */
#include "kernel/softmax.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>
#include <math.h>

#define AI static inline __attribute__((always_inline))

/* lb__exp, 8 lanes (the same operations in the same order) */
AI __m256 exp8(__m256 x)
{
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    /* max/min return their second operand for a NaN first one: NaN lanes
     * are put back at the end */
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(LB__EXP_LO)), _mm256_set1_ps(LB__EXP_HI));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(LB__EXP_LOG2E)), _MM_FROUND_CUR_DIRECTION);
    __m256 r = _mm256_add_ps(_mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(LB__EXP_C1))),
                             _mm256_mul_ps(n, _mm256_set1_ps(LB__EXP_C2)));
    __m256 p = _mm256_set1_ps(LB__EXP_P7);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(LB__EXP_P6));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(LB__EXP_P5));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(LB__EXP_P4));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(LB__EXP_P3));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(LB__EXP_P2));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvtps_epi32(n), e1 = _mm256_srai_epi32(ni, 1), e2 = _mm256_sub_epi32(ni, e1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e2, bias), 23));
    return _mm256_blendv_ps(_mm256_mul_ps(_mm256_mul_ps(p, s1), s2), x, nan);
}

/* Lanes [0, n) of a mask (n < 8 for a partial vector, 8 for a whole one). */
AI __m256i lanes(size_t n)
{
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx);
}

static void softmax(float *row, size_t valid, float scale)
{
    __m256 sc = _mm256_set1_ps(scale), mv = _mm256_set1_ps(-INFINITY);
    for (size_t p = 0; p < valid; p += 8) {
        __m256i m = lanes(valid - p < 8 ? valid - p : 8);
        __m256 y = _mm256_mul_ps(_mm256_maskload_ps(row + p, m), sc);
        _mm256_maskstore_ps(row + p, m, y);
        /* a NaN y, or a lane past valid, keeps mv */
        __m256 past = _mm256_castsi256_ps(_mm256_xor_si256(m, _mm256_set1_epi32(-1)));
        __m256 keep = _mm256_or_ps(_mm256_cmp_ps(y, y, _CMP_UNORD_Q), past);
        mv = _mm256_blendv_ps(_mm256_max_ps(y, mv), mv, keep);
    }
    float lane_max[8], mxs = -INFINITY;
    _mm256_storeu_ps(lane_max, mv);
    for (int i = 0; i < 8; i++)
        if (lane_max[i] > mxs) mxs = lane_max[i];
    __m256 mx = _mm256_set1_ps(mxs), sum0 = _mm256_setzero_ps(), sum1 = sum0;
    for (size_t p = 0; p < valid; p += 8) {
        size_t n = valid - p < 8 ? valid - p : 8;
        __m256i m = lanes(n);
        __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(row + p, m), mx));
        _mm256_maskstore_ps(row + p, m, e);
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m)); /* lanes past valid add +0: nothing */
        if (p % 16 == 0) sum0 = _mm256_add_ps(sum0, e);
        else sum1 = _mm256_add_ps(sum1, e);
    }
    /* lane i + i+8, then i + i+4, i + i+2, i + i+1 */
    __m256 s8 = _mm256_add_ps(sum0, sum1);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    __m256 inv = _mm256_set1_ps(1.0f / _mm_cvtss_f32(s1));
    for (size_t p = 0; p < valid; p += 8) {
        __m256i m = lanes(valid - p < 8 ? valid - p : 8);
        _mm256_maskstore_ps(row + p, m, _mm256_mul_ps(_mm256_maskload_ps(row + p, m), inv));
    }
}

const lb__softmax_fn lb__softmax_avx2 = softmax;
#else
const lb__softmax_fn lb__softmax_avx2 = 0;
#endif

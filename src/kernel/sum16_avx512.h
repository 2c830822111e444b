/* lb__sum16f (quant/qkernels.h) of four zmm at once: the same additions in
 * the same tree, lane-wise, so each result is that function's bit for bit
 * (float addition is commutative, so operand order within an add does not
 * matter; the tree does). Included by files compiled with AVX-512F. */
#ifndef LB_KERNEL_SUM16_AVX512_H
#define LB_KERNEL_SUM16_AVX512_H

#include <immintrin.h>

/* {lb__sum16f(a), lb__sum16f(b), lb__sum16f(c), lb__sum16f(d)} */
static inline __attribute__((always_inline)) __m128 lb__sum16f_x4_avx512(__m512 a, __m512 b, __m512 c, __m512 d)
{
    /* t[i] = s[i] + s[i + 8]: a's and b's in one vector, c's and d's in another */
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    /* t[i] + t[i + 4], i < 4: quarter q holds row q's four */
    __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    /* (t0 + t2) and (t1 + t3) in lanes 0, 1 of each quarter, then their sum in lane 0 */
    __m512 e = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4E));
    __m512 f = _mm512_add_ps(e, _mm512_permute_ps(e, 0xB1));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12), f));
}

#endif

/* A transposing reduction tree over sixteen zmm vectors, shared by the
 * AVX-512 kernels of the quantizers (quant/qkernels_avx512.c, the ggml
 * blocks of io/ggml_blocks_avx512.c). Included by files compiled with
 * AVX-512F. */
#ifndef LB_UTIL_TREE16_AVX512_H
#define LB_UTIL_TREE16_AVX512_H

#include <immintrin.h>

/* How a tree combines two lanes: float sum, maximum of the bits as
 * unsigned integers (magnitudes), float minimum or maximum (the sign of a
 * zero result is either operand's). */
enum { LB__TREE_SUM = 0, LB__TREE_MAGNITUDE_MAX = 1, LB__TREE_MIN = 2, LB__TREE_MAX = 3 };

static inline __attribute__((always_inline)) __m512 lb__pair16_avx512(__m512 a, __m512 b, int op)
{
    if (op == LB__TREE_MAGNITUDE_MAX)
        return _mm512_castsi512_ps(_mm512_max_epu32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
    if (op == LB__TREE_MIN) return _mm512_min_ps(a, b);
    if (op == LB__TREE_MAX) return _mm512_max_ps(a, b);
    return _mm512_add_ps(a, b);
}

/* Lane j of the result for vector j: its levels pair the same lanes as
 * lb__sum16f's (quant/qkernels.h: i with i+8, i with i+4, i with i+2, i
 * with i+1), then a permute into vector order. Adding (LB__TREE_SUM), each
 * sum is lb__sum16f's bits; for the others the order does not matter. */
static inline __attribute__((always_inline)) __m512 lb__tree16x16_avx512(const __m512 m[16], int op)
{
    __m512 a[8], c[4], d[2];
    for (int k = 0; k < 8; k++)
        a[k] = lb__pair16_avx512(_mm512_shuffle_f32x4(m[2 * k], m[2 * k + 1], 0x44),
                                 _mm512_shuffle_f32x4(m[2 * k], m[2 * k + 1], 0xEE), op);
    for (int k = 0; k < 4; k++)
        c[k] = lb__pair16_avx512(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x88),
                                 _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xDD), op);
    for (int k = 0; k < 2; k++)
        d[k] = lb__pair16_avx512(_mm512_shuffle_ps(c[2 * k], c[2 * k + 1], 0x44),
                                 _mm512_shuffle_ps(c[2 * k], c[2 * k + 1], 0xEE), op);
    __m512 e = lb__pair16_avx512(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD), op);
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, e);
}

static inline __attribute__((always_inline)) __m512 lb__tree16x16_min_avx512(const __m512 m[16])
{
    return lb__tree16x16_avx512(m, LB__TREE_MIN);
}

static inline __attribute__((always_inline)) __m512 lb__tree16x16_max_avx512(const __m512 m[16])
{
    return lb__tree16x16_avx512(m, LB__TREE_MAX);
}

#endif

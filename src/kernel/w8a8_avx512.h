/* Helpers the AVX-512 and VNNI W8A8 kernels share (w8a8_avx512.c,
 * w8a8_vnni.c): include only from files built with AVX-512 flags. */
#ifndef LB_KERNEL_W8A8_AVX512_H
#define LB_KERNEL_W8A8_AVX512_H

#include <immintrin.h>
#include <string.h>

#include "kernel/w8a8_kernels.h"

/* The activation quantizer of both sets; biased: store q + 128 (VNNI). */
float lb__w8a8_quant_i8_avx512(const float *x, size_t cols, float static_scale, int8_t *q, int biased);
/* The fp8 product of both sets. */
void lb__w8a8_gemm_f8_avx512(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t r0, size_t r1, float *y, float *wbuf);

/* Tokens per chunk: a chunk's activations stay in L2 while every row
 * block of a thread's slice passes over them. */
#define LB__W8A8_TOKEN_CHUNK 128

/* A call of fn on a tile of mt tokens x mr rows (1..4 each) with both
 * counts constants, so that each case compiles to its own unrolled code. */
#define LB__W8A8_TILE_CASES(fn)                                                                  \
    switch ((mt - 1) * 4 + (mr - 1)) {                                                  \
    case 0: fn(w, a, t, r, 1, 1, y); break;                                             \
    case 1: fn(w, a, t, r, 1, 2, y); break;                                             \
    case 2: fn(w, a, t, r, 1, 3, y); break;                                             \
    case 3: fn(w, a, t, r, 1, 4, y); break;                                             \
    case 4: fn(w, a, t, r, 2, 1, y); break;                                             \
    case 5: fn(w, a, t, r, 2, 2, y); break;                                             \
    case 6: fn(w, a, t, r, 2, 3, y); break;                                             \
    case 7: fn(w, a, t, r, 2, 4, y); break;                                             \
    case 8: fn(w, a, t, r, 3, 1, y); break;                                             \
    case 9: fn(w, a, t, r, 3, 2, y); break;                                             \
    case 10: fn(w, a, t, r, 3, 3, y); break;                                            \
    case 11: fn(w, a, t, r, 3, 4, y); break;                                            \
    case 12: fn(w, a, t, r, 4, 1, y); break;                                            \
    case 13: fn(w, a, t, r, 4, 2, y); break;                                            \
    case 14: fn(w, a, t, r, 4, 3, y); break;                                            \
    default: fn(w, a, t, r, 4, 4, y); break;                                            \
    }

/* ---- shared tile helpers ---- */

/* Adds the lane sums of the 16 accumulators (lane i of the result: the
 * sum of acc[i]'s lanes, integer adds in any order being exact) to the
 * int64 totals of lanes 0-7 and 8-15: a transposing tree, 15 adds. */
static inline void lb__w8a8_add_sums_avx512(const __m512i acc[16], __m512i *lo, __m512i *hi)
{
    __m512i b[8], c[4];
    for (int i = 0; i < 8; i++) /* per 128-bit block: [A0+A2, B0+B2, A1+A3, B1+B3] */
        b[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[2 * i], acc[2 * i + 1]),
                                _mm512_unpackhi_epi32(acc[2 * i], acc[2 * i + 1]));
    for (int i = 0; i < 4; i++) /* per block: the block's sums of acc[4i .. 4i+3] */
        c[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(b[2 * i], b[2 * i + 1]),
                                _mm512_unpackhi_epi64(b[2 * i], b[2 * i + 1]));
    /* then the four 128-bit blocks of each c[i] are added together */
    __m512i d0 = _mm512_add_epi32(_mm512_shuffle_i32x4(c[0], c[1], 0x88), _mm512_shuffle_i32x4(c[0], c[1], 0xDD));
    __m512i d1 = _mm512_add_epi32(_mm512_shuffle_i32x4(c[2], c[3], 0x88), _mm512_shuffle_i32x4(c[2], c[3], 0xDD));
    __m512i s = _mm512_add_epi32(_mm512_shuffle_i32x4(d0, d1, 0x88), _mm512_shuffle_i32x4(d0, d1, 0xDD));
    *lo = _mm512_add_epi64(*lo, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(s)));
    *hi = _mm512_add_epi64(*hi, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(s, 1)));
}

/* y for a tile from the exact dots (lane t * 4 + r): one conversion to
 * fp32 (vcvtqq2ps rounds to nearest even, as the scalar (float) cast),
 * then float(dot) * (s_t * s_w). */
static inline void lb__w8a8_store_tile_avx512(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t t0, size_t r0, int mt, int mr,
                                __m512i lo, __m512i hi, float *y)
{
    __m512 f = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtepi64_ps(lo)), _mm512_cvtepi64_ps(hi), 1);
    /* scale and row_scale carry 4 spare entries: whole groups of 4 load */
    __m512 st = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                      _mm512_castps128_ps512(_mm_loadu_ps(a->scale + t0)));
    __m512 sw = _mm512_broadcast_f32x4(_mm_loadu_ps(w->row_scale + r0));
    float out[16];
    _mm512_storeu_ps(out, _mm512_mul_ps(f, _mm512_mul_ps(st, sw)));
    size_t rows = w->m->rows;
    for (int t = 0; t < mt; t++) memcpy(y + (t0 + t) * rows + r0, out + 4 * t, (size_t)mr * sizeof(float));
}

#endif

/* One token's int8 activations staged in AVX-512 vectors: the vector twin
 * of lb__qdot8_stage's block loop in qdot8.c (the reference), for the int8 and
 * 4-bit layouts (lane widths 4 and 8; fp8's bf16 pairs stay there).
 *
 * Why: decode stages the input of every matrix call on the calling
 * thread while the other waits, and the block loop (a quantizer call per
 * 32 values, then bytes moved and lane sums added one by one) took about
 * 2 us for a 576-wide row, 121 times a token on SmolLM2: a tenth of its
 * int8-mode decode. Here a block is quantized as w8a8's quant_i8 does it
 * (the same max, division, clamp and rounding, so the same codes), its
 * even and odd elements are split by two dword permutes, and a group's
 * lane sums are vpdpbusd of its codes with bytes of 1. */
#include "kernel/qdot8.h"
#include "kernel/w8a8_kernels.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__)

#include <immintrin.h>

/* elements k .. k+15 of a row of cols: the mask of those inside it */
static inline __mmask16 inside(size_t cols, size_t k)
{
    return k >= cols ? 0 : cols - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - k)) - 1);
}

/* The block of 32 at k0 as int32 codes (c0: elements 0-15, c1: 16-31) and
 * its scale, quant_i8's: d = absmax / 127 (1 for a block of zeros), codes
 * x / d clamped to +-127 and rounded to nearest even. A block wholly past
 * the row has codes 0 and d = 0, as lb__qdot8_stage gives it. */
static inline float quant_block(const float *x, size_t cols, size_t k0, __m512i *c0, __m512i *c1)
{
    const __mmask16 m0 = inside(cols, k0), m1 = inside(cols, k0 + 16);
    if (!m0) {
        *c0 = *c1 = _mm512_setzero_si512();
        return 0.0f;
    }
    const __m512 x0 = _mm512_maskz_loadu_ps(m0, x + k0), x1 = _mm512_maskz_loadu_ps(m1, x + k0 + 16);
    const float d = lb__w8a8_i8_scale(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1))));
    const __m512 dv = _mm512_set1_ps(d), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    *c0 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_div_ps(x0, dv), lo), hi));
    *c1 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_div_ps(x1, dv), lo), hi));
    return d;
}

/* A group's lane sums (sums) into cxs (times -off) and xs (if any), and
 * its scales into d: lane l takes scale[l / lanes_per_block]. */
static inline void group_lanes(__m512i sums, const float scale[4], __m512i lane_block, int off, int32_t *cxs,
                               int32_t *xs, float *d)
{
    _mm512_storeu_si512(cxs, _mm512_mullo_epi32(sums, _mm512_set1_epi32(-off)));
    if (xs) _mm512_storeu_si512(xs, sums);
    _mm512_storeu_ps(d, _mm512_permutexvar_ps(lane_block, _mm512_castps128_ps512(_mm_loadu_ps(scale))));
}

void lb__qdot8_stage_token_vnni(const float *x, size_t cols, size_t groups, size_t lane_elems, int off, int8_t *q,
                                int32_t *cxs, int32_t *xs, float *d)
{
    const __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
    if (lane_elems == 8) { /* 4-bit: a group is 4 blocks; its 64 even elements, then the 64 odd ones */
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        const __m512i lane_block = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
        for (size_t g = 0; g < groups; g++) {
            int8_t *qg = q + g * 128;
            float scale[4];
            for (size_t b = 0; b < 4; b++) {
                __m512i c0, c1;
                scale[b] = quant_block(x, cols, g * 128 + 32 * b, &c0, &c1);
                _mm_storeu_si128((__m128i *)(void *)(qg + 16 * b),
                                 _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(c0, even, c1)));
                _mm_storeu_si128((__m128i *)(void *)(qg + 64 + 16 * b),
                                 _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(c0, odd, c1)));
            }
            /* lane l: even codes 4l .. 4l+3 and odd ones, elements 8l .. 8l+7 */
            __m512i sums = _mm512_dpbusd_epi32(zero, ones, _mm512_loadu_si512(qg));
            sums = _mm512_dpbusd_epi32(sums, ones, _mm512_loadu_si512(qg + 64));
            group_lanes(sums, scale, lane_block, off, cxs + g * 16, xs ? xs + g * 16 : NULL, d + g * 16);
        }
        return;
    }
    /* int8 and fp6 (lane width 4): a group is 2 blocks, codes in order */
    const __m512i lane_block = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (size_t g = 0; g < groups; g++) {
        int8_t *qg = q + g * 64;
        float scale[4] = {0};
        for (size_t b = 0; b < 2; b++) {
            __m512i c0, c1;
            scale[b] = quant_block(x, cols, g * 64 + 32 * b, &c0, &c1);
            _mm_storeu_si128((__m128i *)(void *)(qg + 32 * b), _mm512_cvtepi32_epi8(c0));
            _mm_storeu_si128((__m128i *)(void *)(qg + 32 * b + 16), _mm512_cvtepi32_epi8(c1));
        }
        group_lanes(_mm512_dpbusd_epi32(zero, ones, _mm512_loadu_si512(qg)), scale, lane_block, off, cxs + g * 16,
                    xs ? xs + g * 16 : NULL, d + g * 16);
    }
}

#endif

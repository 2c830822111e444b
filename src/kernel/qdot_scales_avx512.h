/* AVX-512 scale decoding shared by the decode kernels (qdot_avx512.c,
 * qdot8_vnni.c): included only by files compiled for AVX-512. */
#ifndef LB_KERNEL_QDOT_SCALES_AVX512_H
#define LB_KERNEL_QDOT_SCALES_AVX512_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

/* UE4M3 codes i .. i + 15 (those in mask k, the rest code 0) as value *
 * 2^-8, exactly: a code shifted left by 7 is the fp16 of that (the E4M3
 * fp16 trick); codes >= 0x7F are NaN. The decode kernels fold the 2^8
 * into their own constants where that is exact. */
static inline __attribute__((always_inline)) __m512 lb__ue4m3_16_over256_avx512(const uint8_t *codes, size_t i,
                                                                                 __mmask16 k)
{
    __m256i c = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(k, codes + i));
    __m512 v = _mm512_cvtph_ps(_mm256_slli_epi16(c, 7));
    __mmask16 nan = _mm256_cmpgt_epi16_mask(c, _mm256_set1_epi16(0x7E));
    return _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
}

/* Scale codes i .. i + 15 of format f (those in mask k; the rest read as
 * code 0, or as 1.0 for e8m0, whose code 0 is the subnormal 2^-127: a
 * product of a subnormal takes a microcode assist, which made decode 4x
 * slower on rows of 18 blocks) to fp32: the exact values lb_dequantize's
 * decoder gives (NaN codes, which lb_quantize never writes, give a NaN).
 * always_inline: with f a constant the switch folds away. */
static inline __attribute__((always_inline)) __m512 lb__scale16_avx512(const lb_format f, const uint8_t *codes,
                                                                        size_t i, __mmask16 k)
{
    __m512 v = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)); /* NaN, for what is no scale format */
    switch (f) {
    case LB_FMT_FP32: v = _mm512_maskz_loadu_ps(k, codes + 4 * i); break;
    case LB_FMT_BF16:
        v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, codes + 2 * i)), 16));
        break;
    case LB_FMT_FP16: v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, codes + 2 * i)); break;
    case LB_FMT_E8M0: {
        __m512i c = _mm512_cvtepu8_epi32(_mm_mask_loadu_epi8(_mm_set1_epi8(127), k, codes + i));
        __m512i b = _mm512_slli_epi32(c, 23); /* 2^(c-127) for c in 1..254 */
        b = _mm512_mask_mov_epi32(b, _mm512_cmpeq_epi32_mask(c, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
        b = _mm512_mask_mov_epi32(b, _mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(0xFF)), _mm512_set1_epi32(0x7FC00000));
        v = _mm512_castsi512_ps(b);
        break;
    }
    case LB_FMT_UE4M3: v = _mm512_mul_ps(lb__ue4m3_16_over256_avx512(codes, i, k), _mm512_set1_ps(256.0f)); break;
    case LB_FMT_FP8_E4M3: /* not scale formats: lb__qdot_check refuses them (v stays NaN) */
    case LB_FMT_FP8_E5M2:
    case LB_FMT_FP8_E4M3FNUZ:
    case LB_FMT_FP8_E5M2FNUZ:
    case LB_FMT_FP6_E2M3:
    case LB_FMT_FP6_E3M2:
    case LB_FMT_FP4_E2M1:
    case LB_FMT_INT8:
    case LB_FMT_UINT8:
    case LB_FMT_INT4:
    case LB_FMT_UINT4:
    case LB_FMT_COUNT: break;
    }
    return v;
}

static inline __attribute__((always_inline)) void lb__scales_to_f32_fmt(const lb_format f, const uint8_t *codes,
                                                                         size_t n, float sm, float *out)
{
    const __m512 smv = _mm512_set1_ps(sm);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = (__mmask16)(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(lb__scale16_avx512(f, codes, i, k), smv)); /* by 1: exact */
    }
}

/* CALL(F) with F the constant equal to scale format f, in a switch that
 * lists every format (the non-scale ones call CALL(LB_FMT_COUNT), whose
 * decode is NaN: the kernels' checks refuse those formats first). */
#define LB__SCALE_FORMAT_SWITCH(f, CALL)                                                                    \
    switch (f) {                                                                                          \
    case LB_FMT_FP32: CALL(LB_FMT_FP32); break;                                                           \
    case LB_FMT_BF16: CALL(LB_FMT_BF16); break;                                                           \
    case LB_FMT_FP16: CALL(LB_FMT_FP16); break;                                                           \
    case LB_FMT_E8M0: CALL(LB_FMT_E8M0); break;                                                           \
    case LB_FMT_UE4M3: CALL(LB_FMT_UE4M3); break;                                                         \
    case LB_FMT_FP8_E4M3:                                                                                 \
    case LB_FMT_FP8_E5M2:                                                                                 \
    case LB_FMT_FP8_E4M3FNUZ:                                                                             \
    case LB_FMT_FP8_E5M2FNUZ:                                                                             \
    case LB_FMT_FP6_E2M3:                                                                                 \
    case LB_FMT_FP6_E3M2:                                                                                 \
    case LB_FMT_FP4_E2M1:                                                                                 \
    case LB_FMT_INT8:                                                                                     \
    case LB_FMT_UINT8:                                                                                    \
    case LB_FMT_INT4:                                                                                     \
    case LB_FMT_UINT4:                                                                                    \
    case LB_FMT_COUNT: CALL(LB_FMT_COUNT); break;                                                         \
    }

/* n scale codes of format f to fp32 times sm, 16 at a time (the format
 * layer's bulk decoder took a sixth of decode time on blocks of 32), one
 * loop per format (a switch per 16 codes was a tenth of the staging). */
static inline void lb__scales_to_f32_avx512(lb_format f, const uint8_t *codes, size_t n, float sm, float *out)
{
#define LB__SCALES_TO_F32(F) lb__scales_to_f32_fmt(F, codes, n, sm, out)
    LB__SCALE_FORMAT_SWITCH(f, LB__SCALES_TO_F32)
#undef LB__SCALES_TO_F32
}

#endif

/* AVX-512 decode attention on a KV cache's codes (kvattn.h): 16 codes at
 * a time converted to their exact fp32 values in registers (fp32 loaded
 * as it is; integers by conversion; bf16 by a shift; fp16 by vcvtph2ps; the fp8
 * formats as binary16 bit patterns: e5m2 is a binary16's top byte, e4m3
 * placed in one is its value / 2^8, and NaN put back), times the scale,
 * then fused multiply-adds into up to LB__KV_ROWS rows' sums. Each lane is
 * one sum in order, as in the fp32 matmul kernel. */
#include "kernel/kvattn.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* Codes' values of lanes [0, n) (n <= 16; the rest read as 0) of a run
 * starting at src. f is a constant after inlining: the switch folds. */
AI __m512 values16(lb_format f, const uint8_t *src, unsigned n, uint32_t nan_bits)
{
    __mmask16 m = (__mmask16)((1u << n) - 1);
    switch (f) {
    case LB_FMT_FP32: return _mm512_maskz_loadu_ps(m, src);
    case LB_FMT_INT8: return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, src)));
    case LB_FMT_INT4: {
        __m128i b = _mm_maskz_loadu_epi8((__mmask16)((1u << ((n + 1) / 2)) - 1), src), low = _mm_set1_epi8(0x0F);
        __m128i x = _mm_unpacklo_epi8(_mm_and_si128(b, low), _mm_and_si128(_mm_srli_epi16(b, 4), low));
        __m128i eight = _mm_set1_epi8(8);
        x = _mm_sub_epi8(_mm_xor_si128(x, eight), eight); /* 4-bit two's complement, sign-extended */
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x));
    }
    case LB_FMT_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src)), 16));
    case LB_FMT_FP16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src));
    case LB_FMT_FP8_E5M2:
        return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, src)), 8));
    case LB_FMT_FP8_E4M3: {
        __m256i c = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, src));
        __m256i mag = _mm256_and_si256(c, _mm256_set1_epi16(0x7F)), sign = _mm256_and_si256(c, _mm256_set1_epi16(0x80));
        __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7), _mm256_slli_epi16(sign, 8));
        __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f)); /* exact: a power of two */
        __mmask16 is_nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7F));
        if (is_nan) { /* never taken on a cache's codes (they are never NaN): the decode stays exact for all */
            __m512i nan = _mm512_or_si512(_mm512_set1_epi32((int)nan_bits),
                                          _mm512_slli_epi32(_mm512_cvtepu16_epi32(sign), 24));
            v = _mm512_mask_blend_ps(is_nan, v, _mm512_castsi512_ps(nan));
        }
        return v;
    }
    /* no cache holds these (lb__kv_format_check) */
    case LB_FMT_FP8_E4M3FNUZ: case LB_FMT_FP8_E5M2FNUZ: case LB_FMT_FP6_E2M3:
    case LB_FMT_FP6_E3M2: case LB_FMT_FP4_E2M1: case LB_FMT_E8M0: case LB_FMT_UE4M3: case LB_FMT_UINT8:
    case LB_FMT_UINT4: case LB_FMT_COUNT: break;
    }
    return _mm512_set1_ps(__builtin_nanf(""));
}


#define ROWS(X) X(0) X(1) X(2) X(3)

/* One panel of 32 positions at a time: per d, its 32 codes' values (two
 * vectors) against each row's Q[r][d]. */
AI void scores_f(lb_format f, const lb__kv_view *k, const float *q, size_t ldq, size_t mr, size_t len, float *s,
                 size_t lds)
{
    const size_t nr = LB__MM_NR, hd = k->head_dim, pr = nr * lb__kv_code_bits(f) / 8, half = pr / 2;
    for (size_t p0 = 0; p0 < len; p0 += nr) {
        const uint8_t *panel = k->codes + p0 / nr * hd * pr;
        __m512 s0 = _mm512_set1_ps(1.0f), s1 = s0;
        if (lb__kv_has_scale(f)) s0 = _mm512_loadu_ps(k->scales + p0), s1 = _mm512_loadu_ps(k->scales + p0 + 16);
#define DECL(r) __m512 a##r##0 = _mm512_setzero_ps(), a##r##1 = _mm512_setzero_ps();
        ROWS(DECL)
        for (size_t d = 0; d < hd; d++) {
            const uint8_t *row = panel + d * pr;
            __m512 w0 = values16(f, row, 16, k->nan_bits), w1 = values16(f, row + half, 16, k->nan_bits);
            if (lb__kv_has_scale(f)) w0 = _mm512_mul_ps(w0, s0), w1 = _mm512_mul_ps(w1, s1);
#define STEP(r)                                                 \
    if (mr > r) {                                               \
        __m512 x = _mm512_set1_ps(q[r * ldq + d]);              \
        a##r##0 = _mm512_fmadd_ps(x, w0, a##r##0);              \
        a##r##1 = _mm512_fmadd_ps(x, w1, a##r##1);              \
    }
            ROWS(STEP)
        }
        size_t np = len - p0 < nr ? len - p0 : nr;
        __mmask16 m0 = np >= 16 ? 0xFFFF : (__mmask16)((1u << np) - 1);
        __mmask16 m1 = np >= 32 ? 0xFFFF : np <= 16 ? 0 : (__mmask16)((1u << (np - 16)) - 1);
#define STORE(r)                                                \
    if (mr > r) {                                               \
        _mm512_mask_storeu_ps(s + r * lds + p0, m0, a##r##0);   \
        _mm512_mask_storeu_ps(s + r * lds + p0 + 16, m1, a##r##1); \
    }
        ROWS(STORE)
#undef DECL
#undef STEP
#undef STORE
    }
}

/* 64 values of every position's row at a time (four vectors; the last
 * chunk masked), each position's values against each row's P[r][t]. */
AI void mix_f(lb_format f, const lb__kv_view *v, const float *p, size_t ldp, size_t mr, size_t len, float *o,
              size_t ldo)
{
    const size_t hd = v->head_dim, vb = 16 * lb__kv_code_bits(f) / 8; /* bytes of 16 codes */
    for (size_t d0 = 0; d0 < hd; d0 += 64) {
        unsigned n[4];
        for (int j = 0; j < 4; j++) {
            size_t left = hd > d0 + 16 * (size_t)j ? hd - d0 - 16 * (size_t)j : 0;
            n[j] = left < 16 ? (unsigned)left : 16;
        }
#define DECL(r) __m512 a##r##0 = _mm512_setzero_ps(), a##r##1 = a##r##0, a##r##2 = a##r##0, a##r##3 = a##r##0;
        ROWS(DECL)
        const uint8_t *row = v->codes + d0 * lb__kv_code_bits(f) / 8;
        for (size_t t = 0; t < len; t++, row += v->stride) {
            __m512 w0 = values16(f, row, n[0], v->nan_bits), w1 = _mm512_setzero_ps(), w2 = w1, w3 = w1;
            if (n[1]) w1 = values16(f, row + vb, n[1], v->nan_bits);
            if (n[2]) w2 = values16(f, row + 2 * vb, n[2], v->nan_bits);
            if (n[3]) w3 = values16(f, row + 3 * vb, n[3], v->nan_bits);
            if (lb__kv_has_scale(f)) {
                __m512 sc = _mm512_set1_ps(v->scales[t]);
                w0 = _mm512_mul_ps(w0, sc), w1 = _mm512_mul_ps(w1, sc);
                w2 = _mm512_mul_ps(w2, sc), w3 = _mm512_mul_ps(w3, sc);
            }
#define STEP(r)                                                                              \
    if (mr > r) {                                                                            \
        __m512 x = _mm512_set1_ps(p[r * ldp + t]);                                           \
        a##r##0 = _mm512_fmadd_ps(x, w0, a##r##0), a##r##1 = _mm512_fmadd_ps(x, w1, a##r##1); \
        a##r##2 = _mm512_fmadd_ps(x, w2, a##r##2), a##r##3 = _mm512_fmadd_ps(x, w3, a##r##3); \
    }
            ROWS(STEP)
        }
#define STORE(r)                                                                       \
    if (mr > r) {                                                                      \
        float *y = o + r * ldo + d0;                                                   \
        _mm512_mask_storeu_ps(y, (__mmask16)((1u << n[0]) - 1), a##r##0);              \
        _mm512_mask_storeu_ps(y + 16, (__mmask16)((1u << n[1]) - 1), a##r##1);         \
        _mm512_mask_storeu_ps(y + 32, (__mmask16)((1u << n[2]) - 1), a##r##2);         \
        _mm512_mask_storeu_ps(y + 48, (__mmask16)((1u << n[3]) - 1), a##r##3);         \
    }
        ROWS(STORE)
#undef DECL
#undef STEP
#undef STORE
    }
}

#define LB__KV_SET lb__kv_avx512
#include "kernel/kvattn_instances.h"
#else
const lb__kv_kernels lb__kv_avx512 = {0, 0};
#endif

/* AVX2 decode attention on a KV cache's codes (kvattn.h): the
 * AVX-512 kernels' method (kvattn_avx512.c) 8 codes at a time, in half
 * panels of 16 positions (scores) and runs of 16 values (mix) so that four
 * rows' sums fit in the 16 ymm registers. A row's last values past a whole
 * 8 are copied into a zeroed buffer first (no masked byte loads here). */
#include "kernel/kvattn.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))


/* The values of 8 codes starting at src (8, 4 or 16 bytes read). */
AI __m256 values8(lb_format f, const uint8_t *src, uint32_t nan_bits)
{
    switch (f) {
    case LB_FMT_FP32: return _mm256_loadu_ps((const float *)(const void *)src);
    case LB_FMT_INT8: return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)src)));
    case LB_FMT_INT4: {
        uint32_t u;
        memcpy(&u, src, 4);
        __m128i b = _mm_cvtsi32_si128((int)u), low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
        __m128i x = _mm_unpacklo_epi8(_mm_and_si128(b, low), _mm_and_si128(_mm_srli_epi16(b, 4), low));
        x = _mm_sub_epi8(_mm_xor_si128(x, eight), eight); /* 4-bit two's complement, sign-extended */
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x));
    }
    case LB_FMT_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)src)), 16));
    case LB_FMT_FP16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)src));
    case LB_FMT_FP8_E5M2:
        return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)src)), 8));
    case LB_FMT_FP8_E4M3: {
        __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)src));
        __m128i mag = _mm_and_si128(c, _mm_set1_epi16(0x7F)), sign = _mm_and_si128(c, _mm_set1_epi16(0x80));
        __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7), _mm_slli_epi16(sign, 8));
        __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f)); /* exact: a power of two */
        __m128i eq = _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F));
        if (_mm_movemask_epi8(eq)) { /* never taken on a cache's codes (they are never NaN): the decode stays exact */
            __m256i nan = _mm256_or_si256(_mm256_set1_epi32((int)nan_bits),
                                          _mm256_slli_epi32(_mm256_cvtepu16_epi32(sign), 24));
            v = _mm256_blendv_ps(v, _mm256_castsi256_ps(nan), _mm256_castsi256_ps(_mm256_cvtepi16_epi32(eq)));
        }
        return v;
    }
    /* no cache holds these (lb__kv_format_check) */
    case LB_FMT_FP8_E4M3FNUZ: case LB_FMT_FP8_E5M2FNUZ: case LB_FMT_FP6_E2M3:
    case LB_FMT_FP6_E3M2: case LB_FMT_FP4_E2M1: case LB_FMT_E8M0: case LB_FMT_UE4M3: case LB_FMT_UINT8:
    case LB_FMT_UINT4: case LB_FMT_COUNT: break;
    }
    return _mm256_set1_ps(__builtin_nanf(""));
}

/* The same for the first n (< 8) codes, the rest read as 0: the codes
 * copied into a zeroed buffer first, so nothing past the row is read. */
AI __m256 values_tail(lb_format f, const uint8_t *src, size_t n, uint32_t nan_bits)
{
    _Alignas(32) uint8_t buf[32] = {0}; /* 8 codes of up to 32 bits */
    memcpy(buf, src, (n * lb__kv_code_bits(f) + 7) / 8);
    return values8(f, buf, nan_bits);
}

#define ROWS(X) X(0) X(1) X(2) X(3)

AI void store_lanes(float *y, __m256 a, size_t n)
{
    if (n >= 8) {
        _mm256_storeu_ps(y, a);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, a);
    memcpy(y, t, n * sizeof *y);
}

/* Half a panel (16 positions) at a time: per d, its 16 codes' values (two
 * vectors) against each row's Q[r][d]. */
AI void scores_f(lb_format f, const lb__kv_view *k, const float *q, size_t ldq, size_t mr, size_t len, float *s,
                 size_t lds)
{
    const size_t nr = LB__MM_NR, hd = k->head_dim, bits = lb__kv_code_bits(f), pr = nr * bits / 8;
    const size_t eight = bits; /* bytes of 8 codes */
    for (size_t p0 = 0; p0 < len; p0 += 16) {
        const uint8_t *panel = k->codes + p0 / nr * hd * pr + (p0 % nr) * bits / 8;
        __m256 s0 = _mm256_set1_ps(1.0f), s1 = s0;
        if (lb__kv_has_scale(f)) s0 = _mm256_loadu_ps(k->scales + p0), s1 = _mm256_loadu_ps(k->scales + p0 + 8);
#define DECL(r) __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = _mm256_setzero_ps();
        ROWS(DECL)
        for (size_t d = 0; d < hd; d++) {
            const uint8_t *row = panel + d * pr;
            __m256 w0 = values8(f, row, k->nan_bits), w1 = values8(f, row + eight, k->nan_bits);
            if (lb__kv_has_scale(f)) w0 = _mm256_mul_ps(w0, s0), w1 = _mm256_mul_ps(w1, s1);
#define STEP(r)                                                 \
    if (mr > r) {                                               \
        __m256 x = _mm256_set1_ps(q[r * ldq + d]);              \
        a##r##0 = _mm256_fmadd_ps(x, w0, a##r##0);              \
        a##r##1 = _mm256_fmadd_ps(x, w1, a##r##1);              \
    }
            ROWS(STEP)
        }
        size_t np = len - p0 < 16 ? len - p0 : 16;
#define STORE(r)                                                      \
    if (mr > r) {                                                     \
        store_lanes(s + r * lds + p0, a##r##0, np);                   \
        if (np > 8) store_lanes(s + r * lds + p0 + 8, a##r##1, np - 8); \
    }
        ROWS(STORE)
#undef DECL
#undef STEP
#undef STORE
    }
}

/* 16 values of every position's row at a time (two vectors), each
 * position's values against each row's P[r][t]. */
AI void mix_f(lb_format f, const lb__kv_view *v, const float *p, size_t ldp, size_t mr, size_t len, float *o,
              size_t ldo)
{
    const size_t hd = v->head_dim, eight = 8 * lb__kv_code_bits(f) / 8;
    for (size_t d0 = 0; d0 < hd; d0 += 16) {
        size_t n0 = hd - d0 < 8 ? hd - d0 : 8, n1 = hd - d0 <= 8 ? 0 : hd - d0 - 8 < 8 ? hd - d0 - 8 : 8;
#define DECL(r) __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = _mm256_setzero_ps();
        ROWS(DECL)
        const uint8_t *row = v->codes + d0 * lb__kv_code_bits(f) / 8;
        for (size_t t = 0; t < len; t++, row += v->stride) {
            __m256 w0, w1 = _mm256_setzero_ps();
            if (n1 == 8) { /* the common case: 16 whole values */
                w0 = values8(f, row, v->nan_bits);
                w1 = values8(f, row + eight, v->nan_bits);
            } else {
                w0 = n0 == 8 ? values8(f, row, v->nan_bits) : values_tail(f, row, n0, v->nan_bits);
                if (n1) w1 = values_tail(f, row + eight, n1, v->nan_bits);
            }
            if (lb__kv_has_scale(f)) {
                __m256 sc = _mm256_set1_ps(v->scales[t]);
                w0 = _mm256_mul_ps(w0, sc), w1 = _mm256_mul_ps(w1, sc);
            }
#define STEP(r)                                                 \
    if (mr > r) {                                               \
        __m256 x = _mm256_set1_ps(p[r * ldp + t]);              \
        a##r##0 = _mm256_fmadd_ps(x, w0, a##r##0);              \
        a##r##1 = _mm256_fmadd_ps(x, w1, a##r##1);              \
    }
            ROWS(STEP)
        }
#define STORE(r)                                                \
    if (mr > r) {                                               \
        store_lanes(o + r * ldo + d0, a##r##0, n0);             \
        if (n1) store_lanes(o + r * ldo + d0 + 8, a##r##1, n1); \
    }
        ROWS(STORE)
#undef DECL
#undef STEP
#undef STORE
    }
}

#define LB__KV_SET lb__kv_avx2
#include "kernel/kvattn_instances.h"
#else
const lb__kv_kernels lb__kv_avx2 = {0, 0};
#endif

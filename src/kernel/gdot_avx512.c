/* AVX-512 decode kernels for ggml-typed matrices: gdot.h's order, bit for
 * bit the reference. A token's 16 partial sums p[0..15] are one zmm, so
 * each chunk of 16 values is decoded straight into one zmm (16 codes
 * widened from 16 bytes at once) and takes one fused multiply-add per
 * token: the AVX2 kernels' work in half the instructions.
 *
 * The decoders are gdot_avx2.c's, widened: each value is the dequantizer's
 * fp32 expression (io/ggml_blocks*.c, -ffp-contract=off there and here),
 * an integer code or grid value converted exactly, times the block's scale
 * formed in scalar code, minus the block's offset where the type has one.
 * Only the types a model mostly carries have a kernel here (Q4_0, Q8_0,
 * Q4_K, Q6_K, IQ4_XS, and IQ4_NL and Q5_K beside them); every other dtype
 * runs the AVX2 kernel, which gives the same bits. */
#include "kernel/gdot.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include "io/ggml_blocks.h"
#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))

INL __m512 cvt(__m512i v) { return _mm512_cvtepi32_ps(v); }

/* One chunk of 16 values w, times every token's x at the same place; xk
 * walks token 0's x along the row. */
#define FMA16(wv)                                                                       \
    do {                                                                                \
        const __m512 w_ = (wv);                                                         \
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xk), w_, a0);                              \
        if (NX > 1) a1 = _mm512_fmadd_ps(_mm512_loadu_ps(xk + ldx), w_, a1);            \
        if (NX > 2) a2 = _mm512_fmadd_ps(_mm512_loadu_ps(xk + 2 * ldx), w_, a2);        \
        if (NX > 3) a3 = _mm512_fmadd_ps(_mm512_loadu_ps(xk + 3 * ldx), w_, a3);        \
        xk += 16;                                                                       \
    } while (0)

/* y[t][r] = the tree over token t's 16 partial sums */
INL void store_sums(const int NX, float *y, size_t ldy, size_t r, __m512 a0, __m512 a1, __m512 a2, __m512 a3)
{
    const __m512 acc[LB__QDOT_MAX_NX] = {a0, a1, a2, a3};
    for (int t = 0; t < NX; t++) {
        float s[16];
        _mm512_storeu_ps(s, acc[t]);
        y[t * ldy + r] = lb__sum16f(s);
    }
}

/* As gdot_avx2.c's: the token count is a constant in each instance, the
 * partial sums live in named registers. */
#define DEFINE_KERNEL(name, ...)                                                                                    \
    INL void name##_rows(const lb__qmat *m, const float *x, const int NX, size_t ldx, size_t r0, size_t r1,       \
                         float *y, size_t ldy)                                                                      \
    {                                                                                                               \
        const size_t nb = m->cols / m->ggml_block, bb = m->ggml_block_bytes;                                       \
        for (size_t r = r0; r < r1; r++) {                                                                          \
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                             \
            const uint8_t *src = m->data + r * m->row_bytes;                                                        \
            const float *xk = x;                                                                                    \
            for (size_t blk = 0; blk < nb; blk++, src += bb) __VA_ARGS__                                            \
            store_sums(NX, y, ldy, r, a0, a1, a2, a3);                                                              \
        }                                                                                                           \
    }                                                                                                               \
    static void name(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,     \
                     size_t ldy)                                                                                    \
    {                                                                                                               \
        switch (nx) {                                                                                               \
        case 1: name##_rows(m, x, 1, ldx, r0, r1, y, ldy); break;                                                  \
        case 2: name##_rows(m, x, 2, ldx, r0, r1, y, ldy); break;                                                  \
        case 3: name##_rows(m, x, 3, ldx, r0, r1, y, ldy); break;                                                  \
        default: name##_rows(m, x, 4, ldx, r0, r1, y, ldy); break; /* nx <= LB__QDOT_MAX_NX */                     \
        }                                                                                                           \
    }

/* 16 unsigned / signed bytes as int32 lanes */
INL __m512i u8x16(__m128i v) { return _mm512_cvtepu8_epi32(v); }
INL __m512i s8x16(__m128i v) { return _mm512_cvtepi8_epi32(v); }

/* Q4_0: low nibbles are elements 0..15, high 16..31; code - 8 times d. */
DEFINE_KERNEL(k_q4_0, {
    const lb__block_q4_0 *b = (const lb__block_q4_0 *)src;
    const __m512 d = _mm512_set1_ps(lb__fp16_to_f32(lb__le16(b->d)));
    const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    const __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
    FMA16(_mm512_mul_ps(d, cvt(s8x16(lo))));
    FMA16(_mm512_mul_ps(d, cvt(s8x16(hi))));
})

/* Q8_0: (float)q * d, in the dequantizer's operand order (the product is
 * the same either way). */
DEFINE_KERNEL(k_q8_0, {
    const lb__block_q8_0 *b = (const lb__block_q8_0 *)src;
    const __m512 d = _mm512_set1_ps(lb__fp16_to_f32(lb__le16(b->d)));
    FMA16(_mm512_mul_ps(cvt(s8x16(_mm_loadu_si128((const __m128i *)b->qs))), d));
    FMA16(_mm512_mul_ps(cvt(s8x16(_mm_loadu_si128((const __m128i *)(b->qs + 16)))), d));
})

/* Q4_K/Q5_K's eight 6-bit scales and mins (ggml_blocks.h gives the packing). */
static void k_scale_min(const uint8_t *s, int sc[8], int mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | (s[j] >> 6) << 4;
        mn[j + 4] = (s[j + 8] >> 4) | (s[j + 4] >> 6) << 4;
    }
}

/* Q4_K / Q5_K (HAS_QH): chunk c's 32 bytes give sub-block 2c (low
 * nibbles) then 2c + 1 (high), each two chunks of 16; Q5_K's fifth bit of
 * sub-block j is bit j of qh[l]. */
#define K45_BODY(block_t, HAS_QH, QH)                                                                           \
    {                                                                                                           \
        const block_t *b = (const block_t *)src;                                                                \
        const float d = lb__fp16_to_f32(lb__le16(b->d)), dmin = lb__fp16_to_f32(lb__le16(b->dmin));            \
        int sc[8], mn[8];                                                                                       \
        k_scale_min(b->scales, sc, mn);                                                                         \
        const __m256i nib = _mm256_set1_epi8(0x0F);                                                             \
        for (int c = 0; c < 4; c++) {                                                                           \
            const __m256i bytes = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));                        \
            __m256i half[2] = {_mm256_and_si256(bytes, nib),                                                    \
                               _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nib)};                             \
            for (int t2 = 0; t2 < 2; t2++) {                                                                    \
                const int j = 2 * c + t2;                                                                       \
                __m256i v = half[t2];                                                                           \
                if (HAS_QH) {                                                                                   \
                    __m256i h = _mm256_loadu_si256((const __m256i *)(QH));                                      \
                    h = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));       \
                    v = _mm256_or_si256(v, _mm256_slli_epi16(h, 4));                                            \
                }                                                                                               \
                const __m512 dj = _mm512_set1_ps(d * (float)sc[j]), mj = _mm512_set1_ps(dmin * (float)mn[j]);  \
                FMA16(_mm512_sub_ps(_mm512_mul_ps(dj, cvt(u8x16(_mm256_castsi256_si128(v)))), mj));            \
                FMA16(_mm512_sub_ps(_mm512_mul_ps(dj, cvt(u8x16(_mm256_extracti128_si256(v, 1)))), mj));       \
            }                                                                                                   \
        }                                                                                                       \
    }
DEFINE_KERNEL(k_q4_k, K45_BODY(lb__block_q4_k, 0, NULL))
DEFINE_KERNEL(k_q5_k, K45_BODY(lb__block_q5_k, 1, b->qh))

/* Q6_K: in half h, group j (elements 128h + 32j + l) takes nibble j / 2 of
 * ql[64h + 32(j & 1) + l] and bits 2j, 2j+1 of qh[32h + l]; its l < 16 and
 * l >= 16 are two sub-blocks. Codes minus 32 as signed bytes. */
DEFINE_KERNEL(k_q6_k, {
    const lb__block_q6_k *b = (const lb__block_q6_k *)src;
    const float d = lb__fp16_to_f32(lb__le16(b->d));
    const __m256i nib = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; h++) {
        const __m256i hbits = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        for (int j = 0; j < 4; j++) {
            __m256i lb = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (j & 1)));
            lb = j < 2 ? _mm256_and_si256(lb, nib) : _mm256_and_si256(_mm256_srli_epi16(lb, 4), nib);
            const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j)), three);
            const __m256i v = _mm256_sub_epi8(_mm256_or_si256(lb, _mm256_slli_epi16(hb, 4)), off);
            const __m512 s0 = _mm512_set1_ps(d * (float)b->scales[8 * h + 2 * j]);
            const __m512 s1 = _mm512_set1_ps(d * (float)b->scales[8 * h + 2 * j + 1]);
            FMA16(_mm512_mul_ps(s0, cvt(s8x16(_mm256_castsi256_si128(v)))));
            FMA16(_mm512_mul_ps(s1, cvt(s8x16(_mm256_extracti128_si256(v, 1)))));
        }
    }
})

/* IQ4_NL / IQ4_XS: 16 bytes hold 32 indices into kvalues_iq4nl (low
 * nibbles first); one byte shuffle per half looks the grid up. */
#define IQ4_32(qs, scale, grid)                                                                   \
    do {                                                                                          \
        const __m128i mask_ = _mm_set1_epi8(0x0F), b_ = _mm_loadu_si128((const __m128i *)(qs));   \
        FMA16(_mm512_mul_ps(scale, cvt(s8x16(_mm_shuffle_epi8(grid, _mm_and_si128(b_, mask_)))))); \
        FMA16(_mm512_mul_ps(                                                                      \
            scale, cvt(s8x16(_mm_shuffle_epi8(grid, _mm_and_si128(_mm_srli_epi16(b_, 4), mask_)))))); \
    } while (0)

DEFINE_KERNEL(k_iq4_nl, {
    const lb__block_iq4_nl *b = (const lb__block_iq4_nl *)src;
    const __m512 d = _mm512_set1_ps(lb__fp16_to_f32(lb__le16(b->d)));
    const __m128i grid = _mm_loadu_si128((const __m128i *)lb__kvalues_iq4nl);
    IQ4_32(b->qs, d, grid);
})

DEFINE_KERNEL(k_iq4_xs, {
    const lb__block_iq4_xs *b = (const lb__block_iq4_xs *)src;
    const float d = lb__fp16_to_f32(lb__le16(b->d));
    const __m128i grid = _mm_loadu_si128((const __m128i *)lb__kvalues_iq4nl);
    for (int ib = 0; ib < 8; ib++) {
        const __m512 dl = _mm512_set1_ps(d * (float)(lb__iq4_xs_scale_code(b, ib) - 32));
        IQ4_32(b->qs + 16 * ib, dl, grid);
    }
})

typedef void (*row_kernel)(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                           size_t ldy);

/* The AVX-512 kernel of a dtype, or NULL: the AVX2 one then (every dtype is
 * listed, so a new one is a compile error here until placed). */
static row_kernel kernel_of(lb_dtype t)
{
    switch (t) {
    case LB_DT_Q4_0: return k_q4_0;
    case LB_DT_Q8_0: return k_q8_0;
    case LB_DT_Q4_K: return k_q4_k;
    case LB_DT_Q5_K: return k_q5_k;
    case LB_DT_Q6_K: return k_q6_k;
    case LB_DT_IQ4_NL: return k_iq4_nl;
    case LB_DT_IQ4_XS: return k_iq4_xs;
    case LB_DT_Q4_1:
    case LB_DT_Q5_0:
    case LB_DT_Q5_1:
    case LB_DT_Q2_K:
    case LB_DT_Q3_K:
    case LB_DT_MXFP4:
    case LB_DT_NVFP4:
    case LB_DT_F32:
    case LB_DT_F16:
    case LB_DT_BF16:
    case LB_DT_F64:
    case LB_DT_F8_E4M3:
    case LB_DT_F8_E5M2:
    case LB_DT_I8:
    case LB_DT_I16:
    case LB_DT_I32:
    case LB_DT_I64:
    case LB_DT_U8:
    case LB_DT_BOOL:
    case LB_DT_QUANTIZED:
    case LB_DT_COUNT: return NULL;
    }
    return NULL;
}

static void gdot_avx512(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                        size_t ldy, void *scratch)
{
    row_kernel k = kernel_of(m->ggml);
    if (k) k(m, x, nx, ldx, r0, r1, y, ldy);
    else lb__gdot_avx2_fn(m, x, nx, ldx, r0, r1, y, ldy, scratch);
}

const lb__qdot_fn lb__gdot_avx512_fn = gdot_avx512;

#else

const lb__qdot_fn lb__gdot_avx512_fn = NULL;

#endif
